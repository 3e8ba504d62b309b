-- Take permits from a semaphore (Redisson's RSemaphore layout: the number of available permits, a string,
-- at the semaphore's name), if enough are available.
--
-- KEYS[1]  the semaphore
-- KEYS[2]  "{<name>}:timeout", read only: a PermitSemaphore's permits taken, which make the name a
--          PermitSemaphore's (see lib/kinds.lua)
-- ARGV[1]  the permits to take (> 0)
--
-- Returns 1 when they were taken, 0 when fewer are available (a semaphore never set has none), or an
-- error RELOCK_... when the name is in use by another kind (see lib/kinds.lua): nothing changed then.
-- @include lib/kinds.lua
-- @include lib/counters.lua

local refused = counter_refusal(KEYS[1], KEYS[2])
if refused then
  return refused
end
local available = tonumber(redis.call('get', KEYS[1]))
if available ~= nil and available >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0
