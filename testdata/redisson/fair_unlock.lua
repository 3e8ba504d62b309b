-- The tests' stand-in for a Java client's RedissonFairLock: its unlock, written from the protocol's
-- description. "now" is the client's clock.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue, redisson_lock_queue:{<name>}
-- KEYS[3]  the scores, redisson_lock_timeout:{<name>}
-- KEYS[4]  the channel prefix, redisson_lock__channel:{<name>}; a waiter listens on "<prefix>:<owner>"
-- ARGV[1]  the lease, in milliseconds
-- ARGV[2]  the owner
-- ARGV[3]  now, in milliseconds (the client's clock)
--
-- Returns 1 when the lock is released (or was gone already), 0 when the owner still holds it, nil when
-- another owner holds it.

-- @include lib/prune.lua

local now = tonumber(ARGV[3])
prune_stale_heads(KEYS[2], KEYS[3], now)

local function wake_head()
  local head = redis.call('lindex', KEYS[2], 0)
  if head then
    redis.call('publish', KEYS[4] .. ':' .. head, '0')
  end
end

if redis.call('exists', KEYS[1]) == 0 then
  wake_head()
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
redis.call('del', KEYS[1])
wake_head()
return 1
