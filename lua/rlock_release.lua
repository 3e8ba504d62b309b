-- Release one hold of a reentrant lock; at the last one, delete the lock and announce the release.
--
-- KEYS[1]  the lock hash (field = owner, value = hold count)
-- KEYS[2]  the release channel, redisson_lock__channel:{<name>}
-- KEYS[3]  the release record, relock_release:{<name>}: "<owner field> <request id>" of the last release
--          that left its owner still holding the lock (one owner holds an RLock at a time). It lives no
--          longer than the lock and is deleted with it.
-- KEYS[4]  the undone attempts' marks, relock_undone:{<name>}, deleted with the lock (see lib/undone.lua)
-- KEYS[5]  relock's waiting owners, relock_lock_waiters:{<name>} (see lib/waiters.lua)
-- KEYS[6]  the prefix of relock's Clients' wake channels, relock_lock_wake:{<name>} (see lib/waiters.lua)
-- KEYS[7]  the void marks of repeated requests, relock_release_void:{<name>} (see lib/release.lua)
-- ARGV[1]  the owner field
-- ARGV[2]  the unlock message ("0", as Redisson's LockPubSub.UNLOCK_MESSAGE)
-- ARGV[3]  '' or the hold count the owner must have for the release to happen. Used to undo an acquisition
--          whose reply was lost: if that acquisition never ran, the count differs and nothing changes.
-- ARGV[4]  '' or the request: '!' then its id when sent first, '?' then the same id when sent again after
--          its reply was lost. A first sending is recorded if it leaves the owner holding; a repeat is not
--          applied if the record names it. (If it released the last hold, the owner holds nothing and a
--          repeat changes nothing either.) Only repeats read the record. A repeat leaves a void mark in
--          KEYS[7], and a sending of the same id that arrives after it, held up on the way, changes nothing.
-- ARGV[5]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
-- ARGV[6]  the named message, published on KEYS[2] when a relock waiter was woken by name (lib/waiters.lua)
-- ARGV[7]  how long a repeat's void mark lives, in milliseconds (see lib/release.lua)
--
-- Returns -1 when the owner does not hold the lock (or its count is not ARGV[3]): nothing was changed;
--         the owner's remaining hold count otherwise (for a repeated request, or a sending of one found
--         void, the current count, unchanged);
--         0 means the lock was deleted and its release announced (announce_release in lib/waiters.lua);
--         an error RELOCK_... when the key is no reentrant lock's (see lib/kinds.lua): nothing changed.

-- The common case, an owner's last hold released by a first sending (no undo, no repeat), runs here before
-- the script defines any function (see rlock_acquire.lua): held_refusal's, release_void's and release_one's
-- checks and steps (lib/kinds.lua, lib/release.lua) for that case alone, and announce_release's
-- (lib/waiters.lua) when nobody waits. With waiters, the release is done and announced below.
local request = ARGV[4]
local released = false
-- @common: the common case, which TestCommonCaseDoesWhatTheGeneralCodeDoes turns off
if ARGV[3] == '' and string.sub(request, 1, 1) ~= '?' and redis.pcall('hexists', KEYS[1], 'mode') == 0
    and redis.call('hget', KEYS[1], ARGV[1]) == '1'
    and (request == '' or redis.call('hexists', KEYS[7], ARGV[1] .. ' ' .. string.sub(request, 2)) == 0) then
  redis.call('del', KEYS[1], KEYS[3], KEYS[4])
  if redis.call('exists', KEYS[5]) == 0 then
    redis.call(ARGV[5], KEYS[2], ARGV[2])
    return 0
  end
  released = true
end

-- @include lib/clock.lua
-- @include lib/waiters.lua
-- @include lib/release.lua
-- @include lib/kinds.lua

if not released then
  local refused = held_refusal(KEYS[1], false)
  if refused then
    return refused
  end
  local left = release_hold(KEYS[1], KEYS[3], KEYS[4], KEYS[7], ARGV[1], ARGV[3], ARGV[4], ARGV[7])
  if left ~= 0 then
    return left
  end
end
announce_release(KEYS[5], KEYS[6], KEYS[2], ARGV[5], ARGV[2], ARGV[6])
return 0
