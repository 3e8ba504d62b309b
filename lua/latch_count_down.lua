-- Count a latch down by one. At zero the latch opens: its key is deleted and "0" is announced on its
-- channel, which wakes every waiter (Redisson's awaiting clients too).
--
-- KEYS[1]  the latch
-- KEYS[2]  its channel, redisson_countdownlatch__channel__{name}
-- KEYS[3]  "{<name>}:timeout", read only: a PermitSemaphore's permits taken (see lib/kinds.lua)
-- ARGV[1]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub
--
-- Returns the count left (0 once open; counting down an open latch changes nothing and returns 0), or an
-- error RELOCK_... when the name is in use by another kind (see lib/kinds.lua): nothing changed then.
-- @include lib/kinds.lua
-- @include lib/counters.lua

local refused = counter_refusal(KEYS[1], KEYS[3])
if refused then
  return refused
end
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
local left = redis.call('decr', KEYS[1])
if left <= 0 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[1], KEYS[2], 0)
  return 0
end
return left
