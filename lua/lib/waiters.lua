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

-- name_waiter names the first waiter (lowest alive time) that match accepts on its Client's channel, as
-- told above, dropping those whose Client does not hear it; it returns the owner named, or nil. With later,
-- the name is sent as '~<owner>': the Client wakes the owner after a head start it leaves to Redisson's
-- waiters (see announce_release).
local function name_waiter(waiters, wakes, publish, match, later)
  local at = 0
  while true do
    local owner = redis.call('zrange', waiters, at, at)[1]
    if not owner then
      return nil
    end
    if match(owner) then
      redis.call('zrem', waiters, owner)
      local name = owner
      if later then
        name = '~' .. owner
      end
      if redis.call(publish, wakes .. ':' .. string.match(owner, '^[^:]*'), name) > 0 then
        return owner
      end
    else
      at = at + 1
    end
  end
end

local function any_owner()
  return true
end

-- announce_release announces that a reentrant lock is free, as told above: message is Redisson's unlock
-- message, named the named message, publish 'publish' or 'spublish'.
--
-- yield, when given and not '', is the ID of a Client that lets the others go first (it handed the lock
-- over to its own waiters maxHandoffs times in a row). The release publishes Redisson's unlock message
-- for Redisson's waiters alone (the named message before it makes relock's Clients ignore it); if anybody
-- heard it, the waiters of relock's Clients are woken only after a head start (the yielding Client's by
-- the Client itself). It names a waiter of another Client if there is one, and returns 1 (3 when
-- somebody heard the unlock message); else 2 when somebody heard it; else it names a waiter of the
-- yielding Client, if any, and returns 0.
local function announce_release(waiters, wakes, channel, publish, message, named, yield)
  yield = yield or ''
  local present = redis.call('exists', waiters) == 1
  if present then
    redis.call('zremrangebyscore', waiters, '-inf', now_ms())
  end
  if yield == '' then
    if present and name_waiter(waiters, wakes, publish, any_owner) then
      redis.call(publish, channel, named)
    end
    redis.call(publish, channel, message)
    return 0
  end
  redis.call(publish, channel, named)
  local heard = redis.call(publish, channel, message) > 0
  local prefix = yield .. ':'
  local function other(owner)
    return string.sub(owner, 1, #prefix) ~= prefix
  end
  if present and name_waiter(waiters, wakes, publish, other, heard) then
    if heard then
      return 3
    end
    return 1
  end
  if heard then
    return 2
  end
  if present then
    name_waiter(waiters, wakes, publish, any_owner)
  end
  return 0
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
