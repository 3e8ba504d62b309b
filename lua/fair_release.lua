-- Release one hold of a fair lock; at the last one, delete the lock and wake the first live waiter, and
-- only that one, on its own channel. Redisson's scores are not changed (see lib/queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (see fair_acquire.lua)
-- KEYS[3]  the Redisson scores (see fair_acquire.lua)
-- KEYS[4]  relock's waiters' alive times (see fair_acquire.lua)
-- KEYS[5]  the channel prefix, redisson_lock__channel:{<name>}; a waiter listens on "<prefix>:<owner>"
-- KEYS[6]  the release record (see rlock_release.lua)
-- KEYS[7]  the undone attempts' marks, deleted with the lock (see rlock_release.lua)
-- KEYS[8]  the void marks of repeated requests, relock_release_void:{<name>} (see lib/release.lua)
-- ARGV[1]  the owner field
-- ARGV[2]  the unlock message ("0")
-- ARGV[3]  '' or the hold count the owner must have (the undo of an acquisition whose reply was lost)
-- ARGV[4]  '' or the request, '!' or '?' then its id (see rlock_release.lua)
-- ARGV[5]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
-- ARGV[6]  how long a repeat's void mark lives, in milliseconds (see lib/release.lua)
--
-- Returns -1 when the owner does not hold the lock (or its count is not ARGV[3]): nothing was changed;
--         the owner's remaining hold count otherwise (see rlock_release.lua); 0 means the lock was deleted
--         and the head woken;
--         an error RELOCK_... when the key is no reentrant lock's (see lib/kinds.lua): nothing changed.

-- The common case, an owner's last hold released by a first sending (no undo, no repeat) while nobody
-- queues, runs here before the script defines any function (see rlock_acquire.lua): held_refusal's and
-- release_hold's checks and steps (lib/kinds.lua, lib/release.lua) for that case alone; with no queue,
-- wake_live_head (lib/queue.lua) has nobody to wake.
local request = ARGV[4]
-- @common: the common case, which TestCommonCaseDoesWhatTheGeneralCodeDoes turns off
if ARGV[3] == '' and string.sub(request, 1, 1) ~= '?' and redis.pcall('hexists', KEYS[1], 'mode') == 0
    and redis.call('hget', KEYS[1], ARGV[1]) == '1' and redis.call('exists', KEYS[2]) == 0
    and (request == '' or redis.call('hexists', KEYS[8], ARGV[1] .. ' ' .. string.sub(request, 2)) == 0) then
  redis.call('del', KEYS[1], KEYS[6], KEYS[7])
  return 0
end

-- @include lib/clock.lua
-- @include lib/release.lua
-- @include lib/queue.lua
-- @include lib/kinds.lua

local refused = held_refusal(KEYS[1], false)
if refused then
  return refused
end
local left = release_hold(KEYS[1], KEYS[6], KEYS[7], KEYS[8], ARGV[1], ARGV[3], ARGV[4], ARGV[6])
if left ~= 0 then
  return left
end
wake_live_head(KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[5], ARGV[2], now_ms())
return 0
