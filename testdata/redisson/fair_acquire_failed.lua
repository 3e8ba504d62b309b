-- The tests' stand-in for a Java client's RedissonFairLock: a waiter giving up, written from the
-- protocol's description. The waiters behind it wait less, by the thread wait time.
--
-- KEYS[1]  the queue, redisson_lock_queue:{<name>}
-- KEYS[2]  the scores, redisson_lock_timeout:{<name>}
-- ARGV[1]  the owner
-- ARGV[2]  the thread wait time, in milliseconds
--
-- Returns nothing.

local queue = redis.call('lrange', KEYS[1], 0, -1)
local behind = false
for _, waiter in ipairs(queue) do
  if behind then
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), waiter)
  elseif waiter == ARGV[1] then
    behind = true
  end
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
return nil
