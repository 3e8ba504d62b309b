-- Take a reentrant lock over (RLock.TakeOver, RLock.Revoke): whoever holds it loses every level of their
-- hold, and the owner gets a first hold, with a new fencing token when the lock is fenced, in one run. A
-- takeover is not a release: nobody is woken, since the lock stays taken.
--
-- KEYS[1..7]  as rlock_acquire.lua's: the lock, the undone attempts' marks, the companions that tell
--             another kind, relock's waiting owners, the fencing counter (fenced locks only)
-- ARGV[1]     how long the hold lives, in milliseconds, with the end of its budget on Redis's clock when
--             the owner's hold has one (see hold_ttl in lib/clock.lua)
-- ARGV[2]     the owner field
-- ARGV[3]     '*' to take the lock from whoever holds it; else a Revoke's request (see RLock.Revoke): the
--             lock is taken only if every holder has a live marker of that request, heard by its Client
--             (lib/requests.lua), so only from holds that were there when the request was made, are still
--             there, and listened for requests when it came
-- ARGV[4]     the attempt's id: its Client undoes a takeover whose reply was lost as it undoes an
--             acquisition (see lib/undone.lua)
--
-- Returns {1, 1, token, clock} the owner holds the lock now (token 0 when the lock is not fenced; clock:
--                           as an acquisition's, see lib/hold.lua);
--         {0, 0, 0}         a holder has no live marker of ARGV[3], heard: nothing changed;
--         {-2, 0, 0}        the takeover was undone before it arrived: nothing changed;
--         {-3, 0, 0}        ARGV[1]'s budget had ended (see hold_ttl): nothing changed;
--         an error RELOCK_... when the name is in use by another kind (see lib/kinds.lua): nothing changed.
-- @include lib/clock.lua
-- @include lib/hold.lua
-- @include lib/undone.lua
-- @include lib/kinds.lua
-- @include lib/requests.lua

if undone(KEYS[2], ARGV[2], ARGV[4]) then
  return {-2, 0, 0}
end
local t = key_type(KEYS[1])
local refused = lock_refusal(KEYS[1], t, false)
if refused then
  return refused
end
if redis.call('exists', KEYS[3], KEYS[4], KEYS[5]) > 0 then
  return refusal('WRONGKIND', other_kind(KEYS[3], 'fairlock', KEYS[4], 'rwlock', KEYS[5], 'election'), t)
end
local holders = {}
if t == 'hash' then
  holders = redis.call('hkeys', KEYS[1])
end
if ARGV[3] ~= '*' then
  local now = now_ms()
  if #holders == 0 then
    return {0, 0, 0}
  end
  for _, f in ipairs(holders) do
    local _, heard = live_marker(KEYS[2], f, ARGV[3], now)
    if heard ~= '1' then
      return {0, 0, 0}
    end
  end
end
local ttl, at, budgeted = hold_ttl(ARGV[1])
if ttl <= 0 then -- the hold's budget is spent (see hold_ttl in lib/clock.lua)
  return {-3, 0, 0}
end
-- The holds taken end here: so do their markers (lib/requests.lua).
for _, f in ipairs(holders) do
  redis.call('hdel', KEYS[2], marker_field(f))
end
redis.call('del', KEYS[1])
redis.call('zrem', KEYS[6], ARGV[2])
return first_hold(KEYS[1], ARGV[2], ttl, at, KEYS[7], budgeted)
