-- release_level takes one hold level of the owner field off the lock and returns the count left, unless
-- the release must not happen: then it returns nil and the reply, -1 when the owner does not hold the lock
-- (or not with the expected count), or the current count for a repeated request that recorded() says was
-- applied already.
local function release_level(lock, field, expected, request, recorded)
  local count = redis.call('hget', lock, field)
  if not count or expected ~= '' and count ~= expected then
    return nil, -1
  end
  if string.sub(request, 1, 1) == '?' and recorded() then
    return nil, tonumber(count)
  end
  return redis.call('hincrby', lock, field, -1)
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
-- that was the last hold: the lock and its record are then deleted, and the caller announces the release.
local function release_hold(lock, record, field, expected, request)
  local id = field .. ' ' .. string.sub(request, 2)
  local count, reply = release_level(lock, field, expected, request, function()
    return redis.call('get', record) == id
  end)
  if not count then
    return reply
  end
  if count > 0 then
    if request ~= '' then
      local ttl = redis.call('pttl', lock)
      if ttl > 0 then
        redis.call('set', record, id, 'PX', ttl)
      else
        redis.call('set', record, id)
      end
    end
    return count
  end
  redis.call('del', lock, record)
  return 0
end

-- release_shared_hold is release_hold for a lock with many holders (a read-write lock): its release record
-- is a hash from owner field to the request id of that owner's last release that left it holding, and the
-- last hold removes the owner's field from the lock and from the record, not the lock itself (the caller
-- decides about that). released, when not nil, is called with the hold level just released (the count
-- before the decrement), before anything else is written.
local function release_shared_hold(lock, record, field, expected, request, released)
  local id = string.sub(request, 2)
  local count, reply = release_level(lock, field, expected, request, function()
    return redis.call('hget', record, field) == id
  end)
  if not count then
    return reply
  end
  if released then
    released(count + 1)
  end
  if count > 0 then
    if request ~= '' then
      redis.call('hset', record, field, id)
      local ttl = redis.call('pttl', lock)
      if ttl > 0 then
        redis.call('pexpire', record, ttl)
      end
    end
    return count
  end
  redis.call('hdel', lock, field)
  redis.call('hdel', record, field)
  return 0
end
