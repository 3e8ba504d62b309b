-- Delete a lock whoever holds it, and announce the release so that waiters retry at once.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the release channel
-- KEYS[3]  the lock's release record (see rlock_release.lua), deleted with it
-- KEYS[4]  the undone attempts' marks (see lib/undone.lua), deleted with it
-- KEYS[5]  relock's waiting owners (see lib/waiters.lua)
-- KEYS[6]  the prefix of relock's Clients' wake channels (see lib/waiters.lua)
-- ARGV[1]  the unlock message
-- ARGV[2]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
-- ARGV[3]  the named message (see lib/waiters.lua)
--
-- Returns 1 when a lock was deleted, 0 when there was none (nothing is published then). The fencing token
-- counter is kept: tokens go on increasing. A key that is no reentrant lock's is not deleted: an error
-- RELOCK_... says what it is (see lib/kinds.lua).
-- @include lib/clock.lua
-- @include lib/waiters.lua
-- @include lib/kinds.lua

local refused = held_refusal(KEYS[1], false)
if refused then
  return refused
end
if redis.call('del', KEYS[1]) == 1 then
  redis.call('del', KEYS[3], KEYS[4])
  announce_release(KEYS[5], KEYS[6], KEYS[2], ARGV[2], ARGV[1], ARGV[3])
  return 1
end
return 0
