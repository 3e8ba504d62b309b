-- The steps every kind's acquire script takes once it may grant the lock. A lock is a hash at its name:
-- owner field -> hold count. A fenced lock has a counter (its key, or nil when the lock is not fenced);
-- each first acquisition takes its next value as the owner's fencing token, a reentry keeps it. ttl and at
-- are the hold's time to live as hold_ttl (lib/clock.lua) returns them, and budgeted its third value. Each
-- grant's reply ends with grant_clock(budgeted): Redis's clock (ms) for a hold with a budget (WithMaxHold),
-- which ends on this clock, counted from its first grant; 0 for the others, which need no TIME.

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

-- extend makes the lock live at least ttl ms from now (or until at): a reentry never shortens the hold (an
-- inner acquisition with a short lease must not cut short an outer one; Redisson resets the TTL to the
-- inner lease here).
local function extend(lock, ttl, at)
  if redis.call('pttl', lock) < ttl then
    expire_hold(lock, ttl, at)
  end
end

-- first_hold gives the owner field its first hold of the lock, which lives ttl ms (or until at), and
-- returns the acquisition's reply {1, 1, token, clock}. The caller has checked that the lock may be granted.
local function first_hold(lock, field, ttl, at, counter, budgeted)
  redis.call('hset', lock, field, 1)
  expire_hold(lock, ttl, at)
  return {1, 1, fencing_token(counter, true), grant_clock(budgeted)}
end

-- reenter adds a hold level for an owner field that holds the lock already, and returns the acquisition's
-- reply {1, count, token, clock}.
local function reenter(lock, field, ttl, at, counter, budgeted)
  local count = redis.call('hincrby', lock, field, 1)
  extend(lock, ttl, at)
  return {1, count, fencing_token(counter, false), grant_clock(budgeted)}
end

-- hold_again gives an owner field that holds the lock already its hold back, with no new level (a lock its
-- owners hold once at most: an Election's, where a second Campaign must not need a second Resign), at
-- least ttl ms from now (or until at), and returns the acquisition's reply {1, count, token, clock}.
local function hold_again(lock, field, ttl, at, counter, budgeted)
  extend(lock, ttl, at)
  return {1, tonumber(redis.call('hget', lock, field)), fencing_token(counter, false), grant_clock(budgeted)}
end
