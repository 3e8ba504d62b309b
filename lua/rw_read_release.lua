-- Release one read hold; at the owner's last, remove its field, and when no live holder is left, delete
-- the lock and wake a waiter.
--
-- KEYS[1]  the lock hash (see rw_read_acquire.lua)
-- KEYS[2]  the channel, redisson_rwlock:{<name>}
-- KEYS[3]  the release record, relock_rwlock_release:{<name>}: a hash from owner field to the request id of
--          its last release that left it holding (see rlock_release.lua; read-write locks have many holders)
-- KEYS[4]  the undone attempts' marks, relock_undone:{<name>}, deleted with the lock (see lib/undone.lua)
-- KEYS[5]  the void marks of repeated requests, relock_release_void:{<name>} (see lib/release.lua)
-- ARGV[1]  the owner field
-- ARGV[2]  the message ("0": wakes one waiter per Client, a writer in practice)
-- ARGV[3]  '' or the read count the owner must have (the undo of an acquisition whose reply was lost)
-- ARGV[4]  '' or the request, '!' or '?' then its id (see rlock_release.lua)
-- ARGV[5]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
-- ARGV[6]  the lock's tag, which starts its read-hold keys (see rw_read_acquire.lua)
-- ARGV[7]  how long a repeat's void mark lives, in milliseconds (see lib/release.lua)
--
-- Returns -1 when the owner holds no read lock (or its count is not ARGV[3]; or every level of its hold
--         expired, see lib/readers.lua): nothing was changed but, when it holds nothing, the removal of
--         its field from the release record;
--         the owner's remaining read count otherwise (for a repeated request, or a sending of one found
--         void, the current one);
--         an error RELOCK_... when the key is no read-write lock's (see lib/kinds.lua): nothing changed.

-- The common case, a lone reader's last read hold released by a first sending (no undo, no repeat), runs
-- here before the script defines any function (see rlock_acquire.lua): the read mode, the reader's one
-- level and nothing else in the lock (HLEN), no void mark of this request, and the level's key, whose
-- deletion tells it was alive; the lock is then deleted and its release published, as the code below
-- does. A level found dead changed nothing: the code below answers it.
local request = ARGV[4]
-- @common: the common case, which TestCommonCaseDoesWhatTheGeneralCodeDoes turns off
if ARGV[3] == '' and string.sub(request, 1, 1) ~= '?' and redis.pcall('hget', KEYS[1], 'mode') == 'read'
    and redis.call('hget', KEYS[1], ARGV[1]) == '1' and redis.call('hlen', KEYS[1]) == 2
    and (request == '' or redis.call('hexists', KEYS[5], ARGV[1] .. ' ' .. string.sub(request, 2)) == 0)
    and redis.call('del', ARGV[6] .. ':' .. ARGV[1] .. ':rwlock_timeout:1') == 1 then
  redis.call('del', KEYS[1], KEYS[3], KEYS[4])
  redis.call(ARGV[5], KEYS[2], ARGV[2])
  return 0
end

-- @include lib/release.lua
-- @include lib/readers.lua
-- @include lib/kinds.lua

local refused = held_refusal(KEYS[1], true)
if refused then
  return refused
end
-- First of all: a repeat leaves its void mark whatever it finds (see lib/release.lua).
local void = release_void(KEYS[5], release_mark(ARGV[1], ARGV[4]), ARGV[4], ARGV[7])
if redis.call('hexists', KEYS[1], 'mode') == 0 then
  return -1
end
local owner = ARGV[1]
local prefix = ARGV[6] .. ':'
-- A reader whose every hold level expired holds nothing, though its field is still there. An owner that
-- holds nothing has no release left to repeat: its release record goes (a release that left it holding
-- wrote one, which would otherwise outlive the owner's hold, and its Client, up to the lock's time to live).
local count = tonumber(redis.call('hget', KEYS[1], owner))
if not count or not read_hold_alive(ARGV[6], owner, count) then
  redis.call('hdel', KEYS[3], owner)
  return -1
end
-- Each read hold level has its own key, deleted with the hold. The levels of one owner are alike (its
-- goroutines may share it, see WithOwner), and each expires by its own lease: a release takes one that
-- expired, if any, so that the levels left are the live ones (the top level's key takes the expired
-- one's place, its time to live kept); else the top one. Taking the top one then would leave the owner
-- fewer live levels than its count, and none at all when the only live one was the top (a hold its Client
-- still believes in, which a writer would take). An undo takes the top one: the level of the attempt
-- whose reply was lost.
local left = release_shared_hold(KEYS[1], KEYS[3], owner, ARGV[3], ARGV[4], void, function(level)
  local top = prefix .. owner .. ':rwlock_timeout:' .. level
  if ARGV[3] == '' then
    for below = 1, level - 1 do
      local key = prefix .. owner .. ':rwlock_timeout:' .. below
      if redis.call('exists', key) == 0 then
        if redis.call('exists', top) == 1 then
          redis.call('rename', top, key)
        end
        return
      end
    end
  end
  redis.call('del', top)
end)
if left ~= 0 then
  return left
end

-- Is anyone left? The writer (a downgrade), or a reader with a hold level that has not expired. The
-- search stops at the first: with many readers, releases stay cheap. Readers whose levels all expired and
-- that are met on the way are dropped (writers drop the rest).
for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
  if field ~= 'mode' then
    if string.sub(field, -6) == ':write' then
      return 0
    end
    if read_hold_alive(ARGV[6], field, tonumber(redis.call('hget', KEYS[1], field)) or 0) then
      return 0
    end
    redis.call('hdel', KEYS[1], field)
  end
end
redis.call('del', KEYS[1], KEYS[3], KEYS[4])
redis.call(ARGV[5], KEYS[2], ARGV[2])
return 0
