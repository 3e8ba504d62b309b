-- The steps every kind's acquire script takes once it may grant the lock. A lock is a hash at its name:
-- owner field -> hold count. A fenced lock has a counter (its key, or nil when the lock is not fenced);
-- each first acquisition takes its next value as the owner's fencing token, a reentry keeps it.

-- fencing_token returns the token of an acquisition: a first one's new token, a reentry's current one, or
-- 0 when the lock is not fenced.
local function fencing_token(counter, first)
  if not counter then
    return 0
  end
  if first then
    return redis.call('incr', counter)
  end
  return tonumber(redis.call('get', counter) or 0)
end

-- extend makes the lock live at least ttl ms from now: a reentry never shortens the hold (an inner
-- acquisition with a short lease must not cut short an outer one; Redisson resets the TTL to the inner
-- lease here).
local function extend(lock, ttl)
  if redis.call('pttl', lock) < ttl then
    redis.call('pexpire', lock, ttl)
  end
end

-- first_hold gives the owner field its first hold of the lock, which lives ttl ms, and returns the
-- acquisition's reply {1, 1, token}. The caller has checked that the lock may be granted.
local function first_hold(lock, field, ttl, counter)
  redis.call('hset', lock, field, 1)
  redis.call('pexpire', lock, ttl)
  return {1, 1, fencing_token(counter, true)}
end

-- reenter adds a hold level for an owner field that holds the lock already, and returns the acquisition's
-- reply {1, count, token}.
local function reenter(lock, field, ttl, counter)
  local count = redis.call('hincrby', lock, field, 1)
  extend(lock, ttl)
  return {1, count, fencing_token(counter, false)}
end

-- hold_again gives an owner field that holds the lock already its hold back, with no new level (a lock its
-- owners hold once at most: an Election's, where a second Campaign must not need a second Resign), at
-- least ttl ms from now, and returns the acquisition's reply {1, count, token}.
local function hold_again(lock, field, ttl, counter)
  extend(lock, ttl)
  return {1, tonumber(redis.call('hget', lock, field)), fencing_token(counter, false)}
end
