-- Delete a fair lock whoever holds it, and wake the first live waiter.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue (see fair_acquire.lua)
-- KEYS[3]  the deadlines (see fair_acquire.lua)
-- KEYS[4]  the channel prefix, redisson_lock__channel:{<name>}
-- KEYS[5]  the release record
-- ARGV[1]  the unlock message
-- ARGV[2]  how to announce: 'publish', or 'spublish' on a cluster (sharded pub/sub)
--
-- Returns 1 when a lock was deleted, 0 when there was none. The queue is kept: its waiters go on in order.
local deleted = redis.call('del', KEYS[1])
redis.call('del', KEYS[5])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then
    break
  end
  local alive = tonumber(redis.call('zscore', KEYS[3], head))
  if alive and alive > now then
    redis.call(ARGV[2], KEYS[4] .. ':' .. head, ARGV[1])
    break
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
end
return deleted
