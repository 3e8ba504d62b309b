-- Read a counter (Redisson's RSemaphore, RCountDownLatch and RPermitExpirableSemaphore keep one, an
-- integer string, at the name), changing nothing.
--
-- KEYS[1]  the counter
-- KEYS[2]  "{<name>}:timeout", read only: a PermitSemaphore's permits taken (see lib/kinds.lua)
-- ARGV[1]  '1' to refuse a PermitSemaphore with permits taken (a CountDownLatch's read), '' otherwise
--
-- Returns the counter (a string: Lua's numbers would round a large one), '0' when it does not exist, or an error RELOCK_... when the name is in use by
-- another kind (see lib/kinds.lua).
-- @include lib/kinds.lua
-- @include lib/counters.lua

local permits = nil
if ARGV[1] == '1' then
  permits = KEYS[2]
end
local refused = counter_refusal(KEYS[1], permits)
if refused then
  return refused
end
return redis.call('get', KEYS[1]) or '0'
