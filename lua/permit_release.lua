-- Give a permit of an expirable semaphore back, by its id, and announce the permits available.
--
-- KEYS[1]  the available permits
-- KEYS[2]  the permits taken, id -> expiry
-- KEYS[3]  the channel, redisson_sc:{name}
-- ARGV[1]  the permit's id
-- ARGV[2]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub
--
-- Returns 1 when the permit was given back, 0 when it was not taken (released already, or expired and
-- given back by another acquisition): nothing changes then.
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
  return 0
end
local available = redis.call('incrby', KEYS[1], 1)
redis.call(ARGV[2], KEYS[3], available)
return 1
