-- Acquire or re-enter a reentrant lock, in Redisson's RLock layout.
--
-- KEYS[1]  the lock: a hash whose field is the owner ("<clientUUID>:<token>") and whose value is the hold count
-- KEYS[2]  fenced locks only: the fencing token counter, redisson_lock_token:{<name>} (Redisson's RFencedLock
--          counter). It has no expiry, so tokens keep increasing across the lock's expiries.
-- ARGV[1]  how long the hold lives, in milliseconds (the lease, or the Client's watchdog timeout)
-- ARGV[2]  the owner field
--
-- Returns {1, holdCount, token} when the owner now holds the lock: a first acquisition has count 1 and, if
--                              fenced, a new token (the counter incremented); a reentry has the new count
--                              and the current token (the one its first acquisition got). token is 0 when
--                              the lock is not fenced.
--         {0, pttl, 0}         when another owner holds it; pttl is the lock's remaining time to live in
--                              milliseconds, or -1 when the key has no expiry (a waiter then waits for the
--                              release message alone).
local ttl = tonumber(ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ttl)
  local token = 0
  if KEYS[2] then
    token = redis.call('incr', KEYS[2])
  end
  return {1, 1, token}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  -- A reentry never shortens the hold: an inner acquisition with a short lease must not cut short an outer
  -- one (Redisson resets the TTL to the inner lease here).
  if redis.call('pttl', KEYS[1]) < ttl then
    redis.call('pexpire', KEYS[1], ttl)
  end
  local token = 0
  if KEYS[2] then
    token = tonumber(redis.call('get', KEYS[2]) or 0)
  end
  return {1, count, token}
end
return {0, redis.call('pttl', KEYS[1]), 0}
