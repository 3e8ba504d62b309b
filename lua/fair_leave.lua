-- Take a waiter out of a fair lock's queue (it gave up: its wait ran out or its context ended), with
-- Redisson's arithmetic: the waiters behind it wait less, by the wait time. If it was at the head and the
-- lock is free, wake the next live waiter, which would otherwise sleep until its own timer.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (see fair_acquire.lua)
-- KEYS[3]  the Redisson scores (see fair_acquire.lua)
-- KEYS[4]  relock's waiters' alive times (see fair_acquire.lua)
-- KEYS[5]  the channel prefix, redisson_lock__channel:{<name>}
-- KEYS[6]  a scratch set, relock_lock_shift:{<name>}, which lives only within the run (see lib/queue.lua)
-- ARGV[1]  the owner field
-- ARGV[2]  the unlock message ("0")
-- ARGV[3]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
-- ARGV[4]  Redisson's fair lock wait time (Config.fairLockWaitTimeout), in milliseconds
--
-- Returns 1 when the owner was queued, 0 when it was not. The other waiters keep their order. Its alive
-- entry is gone either way, so that no later refresh queues it again.
-- @include lib/clock.lua
-- @include lib/queue.lua

local pos = redis.call('lpos', KEYS[2], ARGV[1])
if pos then
  shorten_waits(KEYS[3], KEYS[6], redis.call('lrange', KEYS[2], pos + 1, -1), tonumber(ARGV[4]))
  redis.call('lrem', KEYS[2], 0, ARGV[1])
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('zrem', KEYS[4], ARGV[1])
if pos == 0 and redis.call('exists', KEYS[1]) == 0 then
  wake_live_head(KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[2], now_ms())
end
if pos then
  return 1
end
return 0
