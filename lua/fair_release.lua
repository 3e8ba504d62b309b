-- Release one hold of a fair lock; at the last one, delete the lock and wake the first live waiter, and
-- only that one, on its own channel.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (see fair_acquire.lua)
-- KEYS[3]  the deadlines (see fair_acquire.lua)
-- KEYS[4]  the channel prefix, redisson_lock__channel:{<name>}; a waiter listens on "<prefix>:<owner>"
-- KEYS[5]  the release record (see rlock_release.lua)
-- ARGV[1]  the owner field
-- ARGV[2]  the unlock message ("0")
-- ARGV[3]  '' or the hold count the owner must have (the undo of an acquisition whose reply was lost)
-- ARGV[4]  '' or the request, '!' or '?' then its id (see rlock_release.lua)
-- ARGV[5]  how to announce: 'publish', or 'spublish' on a cluster (sharded pub/sub)
--
-- Returns -1 when the owner does not hold the lock (or its count is not ARGV[3]): nothing was changed;
--         the owner's remaining hold count otherwise; 0 means the lock was deleted and the head woken.
local count = redis.call('hget', KEYS[1], ARGV[1])
if not count then
  return -1
end
if ARGV[3] ~= '' and count ~= ARGV[3] then
  return -1
end
local request = ARGV[1] .. ' ' .. string.sub(ARGV[4], 2)
if string.sub(ARGV[4], 1, 1) == '?' and redis.call('get', KEYS[5]) == request then
  return tonumber(count)
end
count = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if count > 0 then
  if ARGV[4] ~= '' then
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
      redis.call('set', KEYS[5], request, 'PX', ttl)
    else
      redis.call('set', KEYS[5], request)
    end
  end
  return count
end
redis.call('del', KEYS[1], KEYS[5])

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then
    break
  end
  local alive = tonumber(redis.call('zscore', KEYS[3], head))
  if alive and alive > now then
    redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[2])
    break
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
end
return 0
