-- Take one permit of an expirable semaphore (Redisson's RPermitExpirableSemaphore layout: the available
-- permits at the name, and the permits taken in the sorted set "{name}:timeout", each an id scored with
-- its expiry in Unix milliseconds), after giving back the permits whose expiry has passed.
--
-- KEYS[1]  the available permits
-- KEYS[2]  the permits taken, id -> expiry
-- KEYS[3]  the channel, redisson_sc:{name}
-- KEYS[4]  the undone attempts' marks, relock_undone:{name} (see permit_release.lua)
-- ARGV[1]  the permit's time to live, in milliseconds
-- ARGV[2]  the permit's id
-- ARGV[3]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub
--
-- Returns {-2, 0, 0} when this attempt was given back before it arrived (its reply was lost, and its
-- Client's give-back overtook it): nothing changed, and nobody waits for the reply.
--         {1, 0, 0} when the permit was taken; {0, ms, 0} when none is available, ms being the time until
-- the first taken permit expires (-1: none is taken, or none ever expires: the first is scored with
-- Redisson's mark of a permit taken without a lease, 922337203685477, and only a release frees one); or
-- an error RELOCK_... when a key is not what a PermitSemaphore keeps (see lib/kinds.lua): nothing changed
-- then.
-- @include lib/kinds.lua
-- @include lib/counters.lua

if redis.call('hdel', KEYS[4], ARGV[2]) == 1 then
  return {-2, 0, 0}
end
local refused = counter_refusal(KEYS[1], nil) or permits_refusal(KEYS[2], KEYS[1])
if refused then
  return refused
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 100)
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local available = redis.call('incrby', KEYS[1], #expired)
  if available > 0 then
    redis.call(ARGV[3], KEYS[3], available)
  end
end
local available = tonumber(redis.call('get', KEYS[1]))
if available ~= nil and available >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[2], now + tonumber(ARGV[1]), ARGV[2])
  return {1, 0, 0}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if #first > 0 and tonumber(first[2]) < 922337203685477 then
  return {0, math.max(tonumber(first[2]) - now, 0), 0}
end
return {0, -1, 0}
