-- release_one takes one hold level of the owner field off the lock, unless the owner does not hold it (or
-- not with the expected count: -1) or the request is a repeat that record.applied() says was applied
-- already (the current count). A release that leaves the owner holding is remembered in the record
-- (record.remember, given the lock's PTTL) when it has a request id; the last one calls record.forget().
-- released, when not nil, is called with the level just released, before anything else is written.
local function release_one(lock, field, expected, request, record, released)
  local count = redis.call('hget', lock, field)
  if not count or expected ~= '' and count ~= expected then
    return -1
  end
  if string.sub(request, 1, 1) == '?' and record.applied() then
    return tonumber(count)
  end
  count = redis.call('hincrby', lock, field, -1)
  if released then
    released(count + 1)
  end
  if count > 0 then
    if request ~= '' then
      record.remember(redis.call('pttl', lock))
    end
    return count
  end
  record.forget()
  return 0
end

-- release_hold releases one hold of an owner on a reentrant lock, a hash of owner field -> hold count,
-- whose release record is a string: "<owner field> <request id>" of the last release that left its owner
-- still holding the lock (one owner holds such a lock at a time). The record lives no longer than the
-- lock.
--
-- expected is '' or the hold count the owner must have for the release to happen (used to undo an
-- acquisition whose reply was lost: if it never ran, the count differs and nothing changes). request is
-- '' or '!' then an id when sent first, '?' then the same id when sent again after its reply was lost: a
-- first sending is recorded if it leaves the owner holding, and a repeat that the record names is not
-- applied again. Only repeats read the record.
--
-- It returns -1 when the owner does not hold the lock (or not with the expected count): nothing changed;
-- the owner's remaining hold count (for a repeat already applied, the current count, unchanged); or 0 when
-- that was the last hold: the lock, its record and its undone attempts' marks (lib/undone.lua) are then
-- deleted, and the caller announces the release.
local function release_hold(lock, record, marks, field, expected, request)
  local id = field .. ' ' .. string.sub(request, 2)
  return release_one(lock, field, expected, request, {
    applied = function()
      return redis.call('get', record) == id
    end,
    remember = function(ttl)
      if ttl > 0 then
        redis.call('set', record, id, 'PX', ttl)
      else
        redis.call('set', record, id)
      end
    end,
    forget = function()
      redis.call('del', lock, record, marks)
    end,
  })
end

-- release_shared_hold is release_hold for a lock with many holders (a read-write lock): its release record
-- is a hash from owner field to the request id of that owner's last release that left it holding, and the
-- last hold removes the owner's field from the lock and from the record, not the lock itself (the caller
-- decides about that). released, when not nil, is called with the hold level just released (the count
-- before the decrement), before anything else is written.
local function release_shared_hold(lock, record, field, expected, request, released)
  local id = string.sub(request, 2)
  return release_one(lock, field, expected, request, {
    applied = function()
      return redis.call('hget', record, field) == id
    end,
    remember = function(ttl)
      redis.call('hset', record, field, id)
      if ttl > 0 then
        redis.call('pexpire', record, ttl)
      end
    end,
    forget = function()
      redis.call('hdel', lock, field)
      redis.call('hdel', record, field)
    end,
  }, released)
end
