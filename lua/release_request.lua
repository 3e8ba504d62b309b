-- Ask a lock's holders to release it (RLock.RequestRelease, RLock.Revoke): publish the request on each
-- holder's request channel, "relock_release_request:{<name>}:<owner field>", which the holder's Client
-- subscribes to while that hold listens for requests (RLock.ReleaseRequests). A Revoke also marks each
-- holder asked (lib/requests.lua): the holder's Client marks it heard (release_request_heard.lua), and the
-- takeover needs every holder's marker heard (rlock_takeover.lua).
--
-- KEYS[1]  the lock
-- KEYS[2]  the prefix of the holders' request channels, relock_release_request:{<name>}
-- KEYS[3]  the undone attempts' marks, relock_undone:{<name>}, which keep a Revoke's markers
-- ARGV[1]  'publish' or 'spublish'
-- ARGV[2]  the message: "<requesting Client's ID> <request id, or '-' when no acknowledgement is asked>
--          <reason>"
-- ARGV[3]  'ask': publish to every holder (RequestRelease); 'mark': also mark every holder, when every
--          holder is relock's (a Revoke's request); 'again': for a Revoke that asked already, when every
--          holder still has a live marker of the request, keep them live, and publish again to those whose
--          marker is not heard yet (their listener may have been subscribing)
-- ARGV[4]  'mark', 'again': the request, "<requesting Client's ID> <request id>"
-- ARGV[5]  'mark', 'again': how long the markers may live at most, in milliseconds; they never outlive
--          the lock's current expiry
--
-- Returns {heard, relock, life}: heard, the number of subscribers the message reached on the holders'
-- channels (0, and nothing published, when nobody holds the lock); relock, 1 when every holder is a relock
-- owner, which can hear a request, and 0 when one is a Redisson client's, which cannot (see holder_names
-- in lib/waiters.lua); life, for 'mark' and 'again', how long the markers live now, in milliseconds, or 0
-- when there are none: nobody holds the lock, a holder is not relock's, the lock expires within a
-- millisecond, or ('again') a holder has no live marker of the request (it got the lock after the
-- request: the hold asked ended).
-- @include lib/clock.lua
-- @include lib/waiters.lua
-- @include lib/requests.lua

local now = now_ms()
local t = redis.call('type', KEYS[1])['ok']
if t ~= 'hash' then
  return {0, 0, 0}
end
local holders = {}
for _, f in ipairs(redis.call('hkeys', KEYS[1])) do
  if f ~= 'mode' then
    holders[#holders + 1] = f
  end
end
local relock = holder_names(KEYS[1], t)
local mode = ARGV[3]
local deadline = nil
if mode ~= 'ask' and relock == 1 then
  deadline = marker_deadline(KEYS[1], now, tonumber(ARGV[5]))
end
local marked = {} -- 'again': each holder's heard flag
if mode == 'again' then
  for i, f in ipairs(holders) do
    if deadline then
      local _, h = live_marker(KEYS[3], f, ARGV[4], now)
      if not h then
        deadline = nil
      end
      marked[i] = h
    end
  end
  if not deadline then
    return {0, relock, 0}
  end
end
local heard = 0
for i, f in ipairs(holders) do
  local h = marked[i] or '0'
  if h == '0' then
    heard = heard + redis.call(ARGV[1], KEYS[2] .. ':' .. f, ARGV[2])
  end
  if deadline then
    set_marker(KEYS[3], f, deadline, h, ARGV[4], now)
  end
end
local life = 0
if deadline then
  life = deadline - now
end
return {heard, relock, life}
