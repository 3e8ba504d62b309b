-- Ask a lock's holders to release it (RLock.RequestRelease): publish the request on the lock's request
-- channel, relock_release_request:{<name>}, where the Clients whose holders listen for requests hear it
-- (RLock.ReleaseRequests), and tell who holds the lock, in the same run.
--
-- KEYS[1]  the lock
-- KEYS[2]  the request channel
-- ARGV[1]  'publish' or 'spublish'
-- ARGV[2]  the request: "<requesting Client's ID> <reason>"
--
-- Returns {heard, relock, field...}: heard, the number of Clients that heard the request (0, and nothing
-- published, when nobody holds the lock); relock, 1 when every holder is a relock owner, which can hear a
-- request, and 0 when one is a Redisson client's, which cannot (see holder_names in lib/waiters.lua); then
-- the holders' owner fields (a read-write lock's 'mode' left out).
-- @include lib/clock.lua
-- @include lib/waiters.lua

local t = redis.call('type', KEYS[1])['ok']
if t ~= 'hash' then
  return {0, 0}
end
local out = {redis.call(ARGV[1], KEYS[2], ARGV[2]), holder_names(KEYS[1], t)}
for _, f in ipairs(redis.call('hkeys', KEYS[1])) do
  if f ~= 'mode' then
    out[#out + 1] = f
  end
end
return out
