-- Tell a Revoke what a holder's Client knows of the hold it asked (RLock.ReleaseRequests): that the hold
-- heard its request, listening, or that the hold which heard it was lost. Only the holder's own Client
-- runs it, for a hold of its own, so a takeover follows only a request that the hold's Client got while
-- that hold listened (see lib/requests.lua), whoever else is subscribed.
--
-- KEYS[1]  the lock
-- KEYS[2]  the undone attempts' marks, relock_undone:{<name>}, which keep a Revoke's markers
-- ARGV[1]  the holder's owner field
-- ARGV[2]  the request, "<requesting Client's ID> <request id>"
-- ARGV[3]  '1': a hold that listens heard the request: its marker becomes heard, if it is live and the
--          owner still holds the lock; '0': the hold that heard it was lost (the lock deleted or expired,
--          which relock's scripts did not see): its marker is deleted, so that no takeover follows on a
--          later hold of the same owner
--
-- Returns 1 when the marker was changed, 0 when it was not there (or not live, for '1').
-- @include lib/clock.lua
-- @include lib/requests.lua

local now = now_ms()
if ARGV[3] == '0' then
  local v = redis.call('hget', KEYS[2], marker_field(ARGV[1]))
  if v and string.match(v, '^%d+ [01] (.*)$') == ARGV[2] then
    return redis.call('hdel', KEYS[2], marker_field(ARGV[1]))
  end
  return 0
end
if redis.call('type', KEYS[1])['ok'] ~= 'hash' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local deadline = live_marker(KEYS[2], ARGV[1], ARGV[2], now)
if not deadline then
  return 0
end
set_marker(KEYS[2], ARGV[1], deadline, '1', ARGV[2], now)
return 1
