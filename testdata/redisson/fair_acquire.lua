-- The tests' stand-in for a Java client's RedissonFairLock: its acquire-or-enqueue step, written from the
-- protocol's description (not from Redisson's source). "now" is the client's clock.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue, redisson_lock_queue:{<name>}
-- KEYS[3]  the scores, redisson_lock_timeout:{<name>}
-- ARGV[1]  the lease, in milliseconds
-- ARGV[2]  the owner, "<client id>:<thread id>"
-- ARGV[3]  the thread wait time (Config.fairLockWaitTimeout), in milliseconds
-- ARGV[4]  now, in milliseconds (the client's clock)
--
-- Returns nil when the owner now holds the lock; otherwise how long (ms) it may sleep before trying again
-- unless its channel wakes it. Like Redisson's, it fails on a queued owner without a score.

-- @include lib/prune.lua

local owner, wait, now = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

-- Drop the heads whose score has passed.
prune_stale_heads(KEYS[2], KEYS[3], now)

if redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if not head or head == owner then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], owner)
    for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
      redis.call('zincrby', KEYS[3], -wait, waiter)
    end
    redis.call('hset', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
  end
end

if redis.call('hexists', KEYS[1], owner) == 1 then
  redis.call('hincrby', KEYS[1], owner, 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end

if redis.call('zscore', KEYS[3], owner) then
  return math.max(0, redis.call('pttl', KEYS[1]))
end

local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last and last ~= owner then
  ttl = tonumber(redis.call('zscore', KEYS[3], last)) - now
else
  ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + wait + now, owner) == 1 then
  redis.call('rpush', KEYS[2], owner)
end
return ttl
