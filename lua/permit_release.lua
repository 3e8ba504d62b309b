-- Give permits of an expirable semaphore back, by their ids, and announce the permits then available.
--
-- KEYS[1]    the available permits
-- KEYS[2]    the permits taken, id -> expiry
-- KEYS[3]    the channel, redisson_sc:{name}
-- ARGV[1]    how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub
-- ARGV[i+1]  the i-th permit's id
--
-- Returns one integer per id, in order: 1 when the permit was given back, 0 when it was not taken
-- (released already, or expired and given back by an acquisition). Nothing is announced when no permit
-- was given back. An error RELOCK_... when a key is not what a PermitSemaphore keeps (see lib/kinds.lua):
-- nothing changed then.
-- @include lib/kinds.lua
-- @include lib/counters.lua

local refused = counter_refusal(KEYS[1], nil) or permits_refusal(KEYS[2], KEYS[1])
if refused then
  return refused
end
local given = {}
local n = 0
for i = 2, #ARGV do
  given[i - 1] = redis.call('zrem', KEYS[2], ARGV[i])
  n = n + given[i - 1]
end
if n > 0 then
  local available = redis.call('incrby', KEYS[1], n)
  redis.call(ARGV[1], KEYS[3], available)
end
return given
