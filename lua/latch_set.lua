-- Set a count-down latch's count if it is not counting down already (Redisson's RCountDownLatch layout:
-- the count, a string, at the latch's name, which exists while the count is above zero), and announce a
-- new count ("1") on its channel.
--
-- KEYS[1]  the latch
-- KEYS[2]  its channel, redisson_countdownlatch__channel__{name}
-- KEYS[3]  "{<name>}:timeout", read only: a PermitSemaphore's permits taken (see lib/kinds.lua)
-- ARGV[1]  the count (> 0)
-- ARGV[2]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub
--
-- Returns 1 when the count was set, 0 when the latch already had one (nothing changes then), or an error
-- RELOCK_... when the name is in use by another kind (see lib/kinds.lua): nothing changed then.
-- @include lib/kinds.lua
-- @include lib/counters.lua

local refused = counter_refusal(KEYS[1], KEYS[3])
if refused then
  return refused
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], 1)
return 1
