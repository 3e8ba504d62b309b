-- Read a lock, changing nothing: whether it is held, an owner's hold count and the lock's time to live,
-- for IsLocked, IsHeld, HoldCount and RemainingTTL, of every lock kind.
--
-- KEYS[1]  the lock (see rlock_acquire.lua, rw_read_acquire.lua)
-- ARGV[1]  the lock's kind: '' for a reentrant lock (Lock, FairLock, an Election's), 'read' or 'write'
--          for a read-write lock's halves
-- ARGV[2]  '' or the owner field whose hold count to read
-- ARGV[3]  for a read lock, the lock's base, which starts its read-hold keys (see rw_read_acquire.lua)
--
-- Returns {locked, count, pttl}:
--   locked  1 when some owner holds the lock (a read-write lock's half: when it is held in that half's
--           mode), 0 otherwise
--   count   ARGV[2]'s hold count, 0 when it holds nothing (or ARGV[2] is ''); a reader whose every hold
--           level expired (its lease ran out, or its Client stopped renewing it) while other readers keep
--           the lock holds nothing
--   pttl    PTTL of the lock (ms; -1: no expiry; -2: no key)
-- or an error RELOCK_... when the key is not a lock of ARGV[1]'s kind (see lib/kinds.lua).
-- @include lib/readers.lua
-- @include lib/kinds.lua

local rw = ARGV[1] ~= ''
local t = key_type(KEYS[1])
local refused = lock_refusal(KEYS[1], t, rw)
if refused then
  return refused
end
local pttl = redis.call('pttl', KEYS[1])
if t == 'none' then
  return {0, 0, pttl}
end
local locked = 1
if rw and redis.call('hget', KEYS[1], 'mode') ~= ARGV[1] then
  locked = 0
end
local count = 0
if ARGV[2] ~= '' then
  count = tonumber(redis.call('hget', KEYS[1], ARGV[2])) or 0
  if count > 0 and ARGV[1] == 'read' and not read_hold_alive(ARGV[3], ARGV[2], count) then
    count = 0
  end
end
return {locked, count, pttl}
