-- Release one write hold; at the last, either delete the lock or, if the writer also holds the read lock
-- (a downgrade), turn it into a read lock; either way wake every waiting reader.
--
-- KEYS[1]  the lock hash (see rw_read_acquire.lua)
-- KEYS[2]  the channel, redisson_rwlock:{<name>}
-- KEYS[3]  the release record (see rw_read_release.lua)
-- KEYS[4]  the undone attempts' marks, deleted with the lock (see rw_read_release.lua)
-- KEYS[5]  the void marks of repeated requests (see rw_read_release.lua)
-- ARGV[1]  the owner's writer field, "<owner>:write"
-- ARGV[2]  the message ("1", Redisson's READ_UNLOCK_MESSAGE: wakes every waiter)
-- ARGV[3]  '' or the write count the owner must have (the undo of an acquisition whose reply was lost)
-- ARGV[4]  '' or the request, '!' or '?' then its id (see rlock_release.lua)
-- ARGV[5]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
-- ARGV[6]  the lock's tag, which starts its read-hold keys (see rw_read_acquire.lua)
-- ARGV[7]  how long a repeat's void mark lives, in milliseconds (see lib/release.lua)
--
-- Returns -1 when the owner does not hold the write lock (or its count is not ARGV[3]): nothing changed;
--         the owner's remaining write count otherwise (for a repeated request, or a sending of one found
--         void, the current one);
--         an error RELOCK_... when the key is no read-write lock's (see lib/kinds.lua): nothing changed.

-- The common case, the writer's last write hold released by a first sending (no undo, no repeat) while it
-- does not read, runs here before the script defines any function (see rlock_acquire.lua): the write mode,
-- the writer's one level and nothing else in the lock (HLEN), no void mark of this request; the lock is
-- then deleted and its release published, as the code below does.
local request = ARGV[4]
-- @common: the common case, which TestCommonCaseDoesWhatTheGeneralCodeDoes turns off
if ARGV[3] == '' and string.sub(request, 1, 1) ~= '?' and redis.pcall('hget', KEYS[1], 'mode') == 'write'
    and redis.call('hget', KEYS[1], ARGV[1]) == '1' and redis.call('hlen', KEYS[1]) == 2
    and (request == '' or redis.call('hexists', KEYS[5], ARGV[1] .. ' ' .. string.sub(request, 2)) == 0) then
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
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
  return -1
end
local left = release_shared_hold(KEYS[1], KEYS[3], ARGV[1], ARGV[3], ARGV[4], void, nil)
if left ~= 0 then
  return left
end
-- The writer may still read (a downgrade): its read hold, which lived within the write hold (see hold in
-- rw_read_acquire.lua), now gives the hash its time to live, and others may read too.
local reader = string.sub(ARGV[1], 1, -7)
local reading = 0
local levels = tonumber(redis.call('hget', KEYS[1], reader))
if levels then
  reading = read_hold_ttl(ARGV[6], reader, levels)
end
if reading == 0 then
  redis.call('del', KEYS[1], KEYS[3], KEYS[4])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
  if reading < 0 then
    redis.call('persist', KEYS[1])
  else
    redis.call('pexpire', KEYS[1], reading)
  end
end
redis.call(ARGV[5], KEYS[2], ARGV[2])
return 0
