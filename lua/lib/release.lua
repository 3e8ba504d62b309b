-- A release request is sent first as '!' then its id, and again as '?' then the same id when a reply
-- was lost; any of those sendings may reach Redis after a later one (held up on a stalled connection, or
-- buffered in a proxy). So that a request is applied at most once whatever the order, a repeat leaves a
-- void mark, field "<owner field> <id>" of the lock's void marks (relock_release_void:{<name>}, a hash),
-- as it arrives, before it decides (applies the request, finds it applied, or finds the owner holding
-- nothing): every sending of that id arriving later, first or repeat, finds the mark and changes nothing.
-- A first sending leaves none (when no reply was lost, no other sending of its id exists), so the hot
-- path pays one HEXISTS of a key that usually does not exist. The marks have a key of their own, which
-- only expiry deletes: the undone attempts' marks (lib/undone.lua) are deleted by the lock's final
-- release, whoever's, and by a forced release, after which the same owner may hold the lock again, which
-- a late sending must not release. A mark lives ttl ms from the last repeat (as an undone attempt's
-- mark: a sending held up on the way arrives within a network delay, or never); one arriving later than
-- that is applied as if it were the first. The release record (below) tells a repeat whether a first
-- sending that arrived before it was applied.

-- release_mark is the void mark of the owner field's request, '!' or '?' then an id.
local function release_mark(field, request)
  return field .. ' ' .. string.sub(request, 2)
end

-- release_void returns true when request (ARGV: '' or '!'/'?' then an id), whose release_mark is mark, is
-- void: a repeat of it arrived before, so this sending changes nothing and replies as a repeat of an
-- applied request does (the owner's current count, or -1). A repeat leaves the void mark, or finds it,
-- and makes it live ttl ms from now: a sending held up on the way changes nothing if it arrives within
-- ttl ms of any repeat. Every release script calls it before it can return (release_hold does, for its
-- callers).
local function release_void(voids, mark, request, ttl)
  if request == '' then
    return false
  end
  if string.sub(request, 1, 1) ~= '?' then
    return redis.call('hexists', voids, mark) == 1
  end
  local void = redis.call('hset', voids, mark, '1') == 0 -- 0: the mark was there
  redis.call('pexpire', voids, ttl)
  return void
end

-- release_one takes one hold level of the owner field off the lock, unless the owner does not hold it (or
-- not with the expected count: -1), or the request is void (release_void) or a repeat that
-- record.applied() says was applied already (the current count). A release that leaves the owner holding
-- is remembered in the record (record.remember, given the lock's PTTL) when it has a request id; the last
-- one calls record.forget(). released, when not nil, is called with the level just released, before
-- anything else is written.
local function release_one(lock, field, expected, request, void, record, released)
  local count = redis.call('hget', lock, field)
  if not count or expected ~= '' and count ~= expected then
    return -1
  end
  if void or string.sub(request, 1, 1) == '?' and record.applied() then
    return tonumber(count)
  end
  if count == '1' then
    -- The last level is deleted, not decremented first: a final release then only deletes, and so runs
    -- on a server over its maxmemory even where Redis refuses a script whose first write may use memory
    -- (6.2 does; HINCRBY may).
    if released then
      released(1)
    end
    record.forget()
    return 0
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
-- applied again. Only repeats read the record. voids and ttl are release_void's.
--
-- It returns -1 when the owner does not hold the lock (or not with the expected count): nothing changed;
-- the owner's remaining hold count (for a repeat already applied, or a void sending, the current count,
-- unchanged); or 0 when that was the last hold: the lock, its record and its undone attempts' marks
-- (lib/undone.lua) are then deleted, and the caller announces the release.
local function release_hold(lock, record, marks, voids, field, expected, request, ttl)
  local id = release_mark(field, request) -- the record names the request as its void mark does
  local void = release_void(voids, id, request, ttl)
  return release_one(lock, field, expected, request, void, {
    applied = function()
      return redis.call('get', record) == id
    end,
    remember = function(pttl)
      if pttl > 0 then
        redis.call('set', record, id, 'PX', pttl)
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
-- decides about that). void is release_void's answer, which the caller asks first of all. released, when
-- not nil, is called with the hold level just released (the count before the decrement), before anything
-- else is written.
local function release_shared_hold(lock, record, field, expected, request, void, released)
  local id = string.sub(request, 2)
  return release_one(lock, field, expected, request, void, {
    applied = function()
      return redis.call('hget', record, field) == id
    end,
    remember = function(pttl)
      redis.call('hset', record, field, id)
      if pttl > 0 then
        redis.call('pexpire', record, pttl)
      end
    end,
    forget = function()
      redis.call('hdel', lock, field)
      redis.call('hdel', record, field)
    end,
  }, released)
end
