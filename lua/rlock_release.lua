-- Release one hold of a reentrant lock; at the last one, delete the lock and announce the release.
--
-- KEYS[1]  the lock hash (field = owner, value = hold count)
-- KEYS[2]  the release channel, redisson_lock__channel:{<name>}
-- ARGV[1]  the owner field
-- ARGV[2]  the unlock message ("0", as Redisson's LockPubSub.UNLOCK_MESSAGE)
-- ARGV[3]  optional: the hold count the owner must have for the release to happen. Used to undo an
--          acquisition whose reply was lost: if that acquisition never ran, the count differs and nothing changes.
--
-- Returns -1 when the owner does not hold the lock (or its count is not ARGV[3]): nothing was changed;
--         the owner's remaining hold count otherwise; 0 means the lock was deleted and ARGV[2] published.
local count = redis.call('hget', KEYS[1], ARGV[1])
if not count then
  return -1
end
if ARGV[3] and ARGV[3] ~= '' and count ~= ARGV[3] then
  return -1
end
count = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if count > 0 then
  return count
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[2])
return 0
