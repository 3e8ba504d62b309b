-- Read how many times an owner holds the read lock of a read-write lock, changing nothing.
--
-- KEYS[1]  the lock hash (see rw_read_acquire.lua)
-- ARGV[1]  the owner field
-- ARGV[2]  the lock's base, which starts its read-hold keys (see rw_read_acquire.lua)
--
-- Returns the owner's read count, or 0 when it holds no read lock: it has no field, or every level of its
-- hold expired (its lease ran out, or its Client stopped renewing it) while other readers keep the lock.
-- @include lib/readers.lua

local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not n or n <= 0 or redis.call('hexists', KEYS[1], 'mode') == 0 then
  return 0
end
if read_hold_alive(ARGV[2], ARGV[1], n) then
  return n
end
return 0
