-- Acquire or re-enter a reentrant lock, in Redisson's RLock layout.
--
-- KEYS[1]  the lock: a hash whose field is the owner ("<clientUUID>:<token>") and whose value is the hold count
-- ARGV[1]  how long the hold lives, in milliseconds (the lease, or the Client's watchdog timeout)
-- ARGV[2]  the owner field
--
-- Returns {1, holdCount} when the owner now holds the lock (first acquisition: 1; reentry: the new count);
--         {0, pttl}      when another owner holds it; pttl is the lock's remaining time to live in
--                        milliseconds, or -1 when the key has no expiry (a waiter then waits for the release
--                        message alone).
local ttl = tonumber(ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ttl)
  return {1, 1}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  -- A reentry never shortens the hold: an inner acquisition with a short lease must not cut short an outer
  -- one (Redisson resets the TTL to the inner lease here).
  if redis.call('pttl', KEYS[1]) < ttl then
    redis.call('pexpire', KEYS[1], ttl)
  end
  return {1, count}
end
return {0, redis.call('pttl', KEYS[1])}
