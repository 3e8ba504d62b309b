-- Take every available permit of a semaphore.
--
-- KEYS[1]  the semaphore
-- KEYS[2]  "{<name>}:timeout", read only (see semaphore_acquire.lua)
--
-- Returns the number of permits taken (0 for a semaphore never set, which stays unset), or an error
-- RELOCK_... when the name is in use by another kind (see lib/kinds.lua): nothing changed then.
-- @include lib/kinds.lua
-- @include lib/counters.lua

local refused = counter_refusal(KEYS[1], KEYS[2])
if refused then
  return refused
end
local available = tonumber(redis.call('get', KEYS[1]))
if available == nil then
  return 0
end
redis.call('set', KEYS[1], 0)
return available
