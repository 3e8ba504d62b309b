-- Acquire, re-enter or queue for a fair (first come, first served) reentrant lock, in Redisson's
-- RedissonFairLock layout.
--
-- KEYS[1]  the lock: a hash, field = owner ("<clientUUID>:<token>"), value = hold count
-- KEYS[2]  the queue, redisson_lock_queue:{<name>}: a list of waiting owners, oldest first
-- KEYS[3]  the deadlines, redisson_lock_timeout:{<name>}: a sorted set of the waiting owners, scored with the
--          time (milliseconds, Redis's clock) until which each counts as alive. Waiters refresh it; an entry
--          past its time belongs to a process that stopped refreshing (it died) and is dropped when it
--          reaches the head of the queue. A waiter is never dropped for having waited long.
-- KEYS[4]  fenced locks only: the fencing token counter, redisson_lock_token:{<name>}
-- ARGV[1]  how long the hold lives, in milliseconds (the lease, or the watchdog timeout)
-- ARGV[2]  the owner field
-- ARGV[3]  how long a queue entry lives without a refresh, in milliseconds
-- ARGV[4]  '1' to join the queue when the lock cannot be had now; '0' for a single attempt, which never
--          joins it
--
-- Returns {1, holdCount, token}  when the owner now holds the lock (see rlock_acquire.lua; token is 0 when
--                                the lock is not fenced). The owner's queue entry, if any, is gone.
--         {0, wait, 0}           when it does not. wait is how long (ms) the caller may sleep before trying
--                                again unless notified on its channel: for the head of the queue, the
--                                lock's remaining time to live (-1: the key has no expiry, wait for the
--                                notification); for a waiter behind it, the time until the head's entry
--                                would expire if its process died.
-- @include lib/clock.lua
-- @include lib/queue.lua

local now = now_ms()
local owner = ARGV[2]

-- Drop the entries of dead waiters from the head of the queue, so they never block it.
live_head(KEYS[2], KEYS[3], now)

local ttl = tonumber(ARGV[1])
local function token(first)
  if not KEYS[4] then
    return 0
  end
  if first then
    return redis.call('incr', KEYS[4])
  end
  return tonumber(redis.call('get', KEYS[4]) or 0)
end

if redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if not head or head == owner then
    if head then
      redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], owner)
    redis.call('hset', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], ttl)
    return {1, 1, token(true)}
  end
elseif redis.call('hexists', KEYS[1], owner) == 1 then
  local count = redis.call('hincrby', KEYS[1], owner, 1)
  if redis.call('pttl', KEYS[1]) < ttl then
    redis.call('pexpire', KEYS[1], ttl)
  end
  return {1, count, token(false)}
end

-- Not acquired: refresh the owner's entry, or join the queue at its end.
local queued = redis.call('zscore', KEYS[3], owner)
if queued then
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[3]), owner)
  if not redis.call('lpos', KEYS[2], owner) then -- the list lost it (edited by hand): queue it again
    redis.call('rpush', KEYS[2], owner)
  end
elseif ARGV[4] == '1' then
  redis.call('rpush', KEYS[2], owner)
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[3]), owner)
  queued = true
end

local head = redis.call('lindex', KEYS[2], 0)
if queued and head and head ~= owner then
  return {0, math.max(tonumber(redis.call('zscore', KEYS[3], head)) - now, 0), 0}
end
local pttl = redis.call('pttl', KEYS[1])
if pttl == -2 then
  pttl = 0
end
return {0, pttl, 0}
