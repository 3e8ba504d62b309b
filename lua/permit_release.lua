-- Give permits of an expirable semaphore back, by their ids, and announce the permits then available.
--
-- KEYS[1]    the available permits
-- KEYS[2]    the permits taken, id -> expiry
-- KEYS[3]    the channel, redisson_sc:{name}
-- KEYS[4]    the undone attempts' marks, relock_undone:{name}
-- ARGV[1]    how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub
-- ARGV[2]    '0'; or, for a give-back of permits an acquisition may have taken although its reply was lost,
--            how long (ms) to keep a mark for an id that is not taken: its acquisition may not have
--            arrived yet (delayed on a slow link, queued on another connection), and changes nothing when
--            it does (permit_acquire.lua)
-- ARGV[i+2]  the i-th permit's id
--
-- Returns one integer per id, in order: 1 when the permit was given back, 0 when it was not taken
-- (released already, expired and given back by an acquisition, or not taken yet). Nothing is announced when no permit
-- was given back. An error RELOCK_... when a key is not what a PermitSemaphore keeps (see lib/kinds.lua):
-- nothing changed then.
-- @include lib/kinds.lua
-- @include lib/counters.lua

local refused = counter_refusal(KEYS[1], nil) or permits_refusal(KEYS[2], KEYS[1])
if refused then
  return refused
end
local mark = tonumber(ARGV[2])
local given = {}
local n = 0
for i = 3, #ARGV do
  given[i - 2] = redis.call('zrem', KEYS[2], ARGV[i])
  n = n + given[i - 2]
  if given[i - 2] == 0 and mark > 0 then
    redis.call('hset', KEYS[4], ARGV[i], '1')
    if redis.call('pttl', KEYS[4]) < mark then
      redis.call('pexpire', KEYS[4], mark)
    end
  end
end
if n > 0 then
  local available = redis.call('incrby', KEYS[1], n)
  redis.call(ARGV[1], KEYS[3], available)
end
return given
