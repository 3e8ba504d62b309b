-- Take an owner that gave up waiting for a reentrant lock (its wait ran out, its context ended, its Client
-- closed) out of relock's waiting owners. If it is no longer there, a release may have named it meanwhile,
-- and nobody used that wake: if the lock is still free, the release is announced again, so that another
-- waiter, which would otherwise sleep until its timer, tries now.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  relock's waiting owners, relock_lock_waiters:{<name>} (see lib/waiters.lua)
-- KEYS[3]  the lock's channel, redisson_lock__channel:{<name>}
-- KEYS[4]  the prefix of relock's Clients' wake channels, relock_lock_wake:{<name>}
-- ARGV[1]  the owner field
-- ARGV[2]  the unlock message ("0")
-- ARGV[3]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
-- ARGV[4]  the named message (see lib/waiters.lua)
--
-- Returns 1 when the owner was waiting, 0 when it was not.
-- @include lib/clock.lua
-- @include lib/waiters.lua

if redis.call('zrem', KEYS[2], ARGV[1]) == 1 then
  return 1
end
if redis.call('exists', KEYS[1]) == 0 then
  announce_release(KEYS[2], KEYS[4], KEYS[3], ARGV[3], ARGV[2], ARGV[4])
end
return 0
