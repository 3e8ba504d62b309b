-- Relock's waiters' liveness: a sorted set of owner fields scored with the time (ms, Redis's clock) until
-- which each counts as alive. Their Clients' watchdogs refresh it while they wait; a waiter whose time has
-- passed is dead (its process died, or was cut off from Redis), and scripts drop it.

-- keep_alive makes the relock waiter owner alive for ttl ms from now, and the alive set live at least as
-- long.
local function keep_alive(alive, owner, now, ttl)
  redis.call('zadd', alive, now + ttl, owner)
  if redis.call('pttl', alive) < ttl then
    redis.call('pexpire', alive, ttl)
  end
end
