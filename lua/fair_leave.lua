-- Take a waiter out of a fair lock's queue (it gave up: its wait ran out or its context ended). If it was
-- at the head and the lock is free, wake the next live waiter, which would otherwise sleep until its own
-- timer.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (see fair_acquire.lua)
-- KEYS[3]  the deadlines (see fair_acquire.lua)
-- KEYS[4]  the channel prefix, redisson_lock__channel:{<name>}
-- ARGV[1]  the owner field
-- ARGV[2]  the unlock message ("0")
-- ARGV[3]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
--
-- Returns 1 when the owner had an entry, 0 when it had none. The other waiters keep their order.
-- @include lib/clock.lua
-- @include lib/queue.lua

local wasHead = redis.call('lindex', KEYS[2], 0) == ARGV[1]
local removed = redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if wasHead and redis.call('exists', KEYS[1]) == 0 then
  wake_live_head(KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[2], now_ms())
end
if removed > 0 then
  return 1
end
return 0
