-- What tells relock's kinds apart in Redis (see LockKind in Go). Every object keeps a key at its name:
--   a reentrant lock (Lock, FairLock, an Election's lock): a hash of owner -> hold count, without 'mode';
--   a read-write lock: a hash with a 'mode' field;
--   a counter (Semaphore, CountDownLatch, PermitSemaphore): a string holding an integer.
-- Some leave companion keys that tell more, even while the name's own key is gone:
--   a FairLock's (or an Election's) waiters: its queue, redisson_lock_queue:{<name>};
--   an Election that ever had a leader: its stream of leaders, relock_election:{<name>};
--   a read-write lock's waiting priority writers: relock_rwlock_writers:{<name>};
--   a PermitSemaphore with permits taken: its sorted set {<name>}:timeout (see lib/counters.lua).
-- A script that finds its name in use by another kind changes nothing and replies with the error
-- "RELOCK_<WRONGKIND|NOTALOCK|NOTASEMAPHORE> <kind found> <Redis type of the key at the name>", which the
-- Client turns into a *KindError. A Lock and a FairLock (or an Election) with nobody queued have the same
-- keys, and so do a Semaphore and a CountDownLatch: those cannot be told apart.

-- refusal is that error reply. code: 'WRONGKIND', 'NOTALOCK' (a lock's script found no lock) or
-- 'NOTASEMAPHORE' (a counter's script found no counter).
local function refusal(code, found, rtype)
  return redis.error_reply('RELOCK_' .. code .. ' ' .. found .. ' ' .. rtype)
end

-- key_type returns the Redis type of key ('none' when it does not exist).
local function key_type(key)
  return redis.call('type', key)['ok']
end

-- string_kind is the kind of a string key: 'semaphore' (a counter) when it holds an integer, 'other'
-- otherwise.
local function string_kind(key)
  if string.match(redis.call('get', key), '^%-?%d+$') then
    return 'semaphore'
  end
  return 'other'
end

-- other_kind returns the kind of the first of its (key, kind) argument pairs whose key exists, or nil.
-- Callers on a hot path first ask, with one EXISTS of all those keys, whether any does.
local function other_kind(...)
  local args = {...}
  for i = 1, #args, 2 do
    if redis.call('exists', args[i]) == 1 then
      return args[i + 1]
    end
  end
  return nil
end

-- lock_refusal returns the refusal of a lock's script for its lock key, of type t, or nil when the key is
-- absent or a lock of the script's kind: a read-write lock's hash when rw, a reentrant lock's otherwise.
-- A read-write lock's script names the reentrant lock it found by the (key, kind) pairs that follow (see
-- other_kind; 'rlock' when none exists).
local function lock_refusal(lock, t, rw, ...)
  if t == 'hash' then
    local mode = redis.call('hexists', lock, 'mode') == 1
    if mode and not rw then
      return refusal('WRONGKIND', 'rwlock', t)
    elseif rw and not mode then
      return refusal('WRONGKIND', other_kind(...) or 'rlock', t)
    end
    return nil
  elseif t == 'string' then
    return refusal('NOTALOCK', string_kind(lock), t)
  elseif t ~= 'none' then
    return refusal('NOTALOCK', 'other', t)
  end
  return nil
end

-- held_refusal is lock_refusal for a script that does not need the key's type (a release, a read of the
-- leader): one command when the key is absent or of the script's kind.
local function held_refusal(lock, rw)
  local mode = redis.pcall('hexists', lock, 'mode')
  if type(mode) ~= 'number' then -- an error: the key is no hash
    return lock_refusal(lock, key_type(lock), rw)
  elseif mode == 1 and not rw then
    return refusal('WRONGKIND', 'rwlock', 'hash')
  elseif mode == 0 and rw and redis.call('exists', lock) == 1 then
    return refusal('WRONGKIND', 'rlock', 'hash')
  end
  return nil
end

-- rw_acquire_refusal is a ReadWriteLock acquisition's check (t: the lock key's type): the lock is another
-- kind's, or, while it is free, the name is an Election's (its stream of leaders) or a FairLock's (its queue).
local function rw_acquire_refusal(lock, t, election, queue)
  local refused = lock_refusal(lock, t, true, election, 'election', queue, 'fairlock')
  if refused then
    return refused
  end
  if t == 'none' and redis.call('exists', queue, election) > 0 then
    return refusal('WRONGKIND', other_kind(election, 'election', queue, 'fairlock'), t)
  end
  return nil
end
