-- A reentrant lock's waiting relock owners, so that a release wakes one of them, not one in every Client:
--   waiters  relock_lock_waiters:{<name>}: a sorted set of the owner fields of relock's waiters (see
--            lib/alive.lua: their Clients' watchdogs keep them alive). An attempt that fails and will wait
--            adds its owner; one that acquires, or an owner that gives up, removes it.
--   wakes    relock_lock_wake:{<name>}: every relock Client waiting for the lock listens on
--            "<wakes>:<clientUUID>" as well as on the lock's channel.
-- A release takes the waiter whose alive time ends first (the one refreshed longest ago) out of the set and
-- names it on its Client's channel. If the Client hears it (PUBLISH counts a receiver), the release says so on
-- the lock's channel with the named message (a number Redisson's clients ignore), and relock's Clients then
-- ignore the unlock message that follows it. That unlock message is Redisson's, published by every release
-- as Redisson's own do: it wakes one waiter in each Redisson client, and, when nobody was named, in each
-- relock Client. A Client that does not hear the name (it is gone, or it lost its subscriptions, after which
-- all its waiters try again) has its owner dropped, and the next is tried.

-- announce_release announces that a reentrant lock is free, as told above: message is Redisson's unlock
-- message, named the named message, publish 'publish' or 'spublish'.
local function announce_release(waiters, wakes, channel, publish, message, named)
  if redis.call('exists', waiters) == 1 then
    redis.call('zremrangebyscore', waiters, '-inf', now_ms())
    while true do
      local owner = redis.call('zrange', waiters, 0, 0)[1]
      if not owner then
        break
      end
      redis.call('zrem', waiters, owner)
      if redis.call(publish, wakes .. ':' .. string.match(owner, '^[^:]*'), owner) > 0 then
        redis.call(publish, channel, named)
        break
      end
    end
  end
  redis.call(publish, channel, message)
end

-- holder_names reports, as 1 or 0, whether the release of the lock's holder wakes a relock waiter by name:
-- every field of the lock (a hash, its type t) is the owner field of a relock Client, whose ID is a version
-- 8 UUID ("xxxxxxxx-xxxx-8xxx-...:<token>").
local function holder_names(lock, t)
  if t ~= 'hash' then
    return 0
  end
  local holders = redis.call('hkeys', lock)
  for _, f in ipairs(holders) do
    if string.sub(f, 15, 15) ~= '8' or string.sub(f, 37, 37) ~= ':' then
      return 0
    end
  end
  if #holders == 0 then
    return 0
  end
  return 1
end
