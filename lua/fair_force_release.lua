-- Delete a fair lock whoever holds it, and wake the first live waiter.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue (see fair_acquire.lua)
-- KEYS[3]  the Redisson scores (see fair_acquire.lua)
-- KEYS[4]  relock's waiters' alive times (see fair_acquire.lua)
-- KEYS[5]  the channel prefix, redisson_lock__channel:{<name>}
-- KEYS[6]  the release record
-- KEYS[7]  the undone attempts' marks (see lib/undone.lua)
-- ARGV[1]  the unlock message
-- ARGV[2]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
--
-- Returns 1 when a lock was deleted, 0 when there was none. The queue is kept: its waiters go on in order.
-- A key that is no reentrant lock's is not deleted: an error RELOCK_... says what it is (see
-- lib/kinds.lua).
-- @include lib/clock.lua
-- @include lib/queue.lua
-- @include lib/kinds.lua

local refused = held_refusal(KEYS[1], false)
if refused then
  return refused
end
local deleted = redis.call('del', KEYS[1])
redis.call('del', KEYS[6], KEYS[7])
wake_live_head(KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[1], now_ms())
return deleted
