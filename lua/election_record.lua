-- Record a new leader of an election in its stream of leaders, if it still holds the election's lock.
--
-- KEYS[1]  the election's lock (a fair lock's hash: owner -> hold count)
-- KEYS[2]  the stream of leaders, "relock_election:{name}": one entry per term, oldest first
-- ARGV[1]  the new leader's owner field
-- ARGV[2]  its term (the lock's fencing token)
-- ARGV[3]  its value
--
-- Returns 1 when recorded (now, or already: it is idempotent), 0 when the owner does not hold the lock (it
-- lost it before this ran): nothing is written then. The stream keeps about the last 1000 leaders. An
-- error RELOCK_... when the lock's key is no reentrant lock's (see lib/kinds.lua): nothing is written.
-- @include lib/kinds.lua

local refused = held_refusal(KEYS[1], false)
if refused then
  return refused
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
-- While the owner holds the lock nobody else was recorded since its term began: if its term is recorded,
-- it is the last entry.
local last = redis.call('xrevrange', KEYS[2], '+', '-', 'count', 1)
if #last > 0 then
  local flat = last[1][2]
  for i = 1, #flat, 2 do
    if flat[i] == 'term' and flat[i + 1] == ARGV[2] then
      return 1
    end
  end
end
redis.call('xadd', KEYS[2], 'maxlen', '~', 1000, '*', 'term', ARGV[2], 'value', ARGV[3], 'owner', ARGV[1])
return 1
