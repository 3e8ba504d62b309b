-- Release one write hold; at the last, either delete the lock or, if the writer also holds the read lock
-- (a downgrade), turn it into a read lock; either way wake every waiting reader.
--
-- KEYS[1]  the lock hash (see rw_read_acquire.lua)
-- KEYS[2]  the channel, redisson_rwlock:{<name>}
-- KEYS[3]  the release record (see rw_read_release.lua)
-- ARGV[1]  the owner's writer field, "<owner>:write"
-- ARGV[2]  the message ("1", Redisson's READ_UNLOCK_MESSAGE: wakes every waiter)
-- ARGV[3]  '' or the write count the owner must have (the undo of an acquisition whose reply was lost)
-- ARGV[4]  '' or the request, '!' or '?' then its id (see rlock_release.lua)
-- ARGV[5]  how to announce: 'publish', or 'spublish' on a cluster (sharded pub/sub)
--
-- Returns -1 when the owner does not hold the write lock (or its count is not ARGV[3]): nothing changed;
--         the owner's remaining write count otherwise (for a repeated request, the current one).
local writer = ARGV[1]
local count = redis.call('hget', KEYS[1], writer)
if not count or redis.call('hget', KEYS[1], 'mode') ~= 'write' then
  return -1
end
if ARGV[3] ~= '' and count ~= ARGV[3] then
  return -1
end
local request = string.sub(ARGV[4], 2)
if string.sub(ARGV[4], 1, 1) == '?' and redis.call('hget', KEYS[3], writer) == request then
  return tonumber(count)
end
count = redis.call('hincrby', KEYS[1], writer, -1)
if count > 0 then
  if ARGV[4] ~= '' then
    redis.call('hset', KEYS[3], writer, request)
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
      redis.call('pexpire', KEYS[3], ttl)
    end
  end
  return count
end
redis.call('hdel', KEYS[1], writer)
redis.call('hdel', KEYS[3], writer)
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1], KEYS[3])
else
  redis.call('hset', KEYS[1], 'mode', 'read') -- the writer still reads: others may read too
end
redis.call(ARGV[5], KEYS[2], ARGV[2])
return 0
