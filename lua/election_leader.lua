-- Read the current leader of an election: the last leader recorded, if it still holds the election's
-- lock. Read-only.
--
-- KEYS[1]  the election's lock (a fair lock's hash: owner -> hold count)
-- KEYS[2]  the stream of leaders, "relock_election:{name}"
--
-- Returns {entry id, term, value, owner}, or {} when there is no leader: none was ever recorded, or the
-- last one recorded does not hold the lock any more (it resigned or lost it, and its successor, if any, is
-- not recorded yet). An error RELOCK_... when the lock's key is no reentrant lock's (see lib/kinds.lua).
-- @include lib/kinds.lua

local refused = held_refusal(KEYS[1], false)
if refused then
  return refused
end
local last = redis.call('xrevrange', KEYS[2], '+', '-', 'count', 1)
if #last == 0 then
  return {}
end
local fields = {}
local flat = last[1][2]
for i = 1, #flat, 2 do
  fields[flat[i]] = flat[i + 1]
end
if not fields['owner'] or redis.call('hexists', KEYS[1], fields['owner']) == 0 then
  return {}
end
return {last[1][1], fields['term'], fields['value'], fields['owner']}
