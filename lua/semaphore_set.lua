-- Set a semaphore's permits if it has never been set (it does not exist), and announce them.
--
-- KEYS[1]  the semaphore
-- KEYS[2]  its channel, redisson_sc:{name}
-- ARGV[1]  the permits (>= 0)
-- ARGV[2]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub
--
-- Returns 1 when they were set, 0 when the semaphore already existed (nothing changes then), or an error
-- RELOCK_... when the name's key is no counter (see lib/kinds.lua): nothing changed then. (It serves a
-- PermitSemaphore's too.)
-- @include lib/kinds.lua
-- @include lib/counters.lua

local refused = counter_refusal(KEYS[1], nil)
if refused then
  return refused
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
