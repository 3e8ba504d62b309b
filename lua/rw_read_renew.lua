-- Renew many read holds at once: the watchdog's batch. Only the owner's own hold levels are extended, so a
-- reader whose Client stopped renewing expires even while other readers keep the lock alive.
--
-- KEYS[i]      the i-th hold's lock hash (see rw_read_acquire.lua)
-- ARGV[1]      the watchdog timeout, in milliseconds
-- ARGV[2i]     the i-th hold's owner field
-- ARGV[2i+1]   the i-th hold's lock tag, which starts its read-hold keys (see rw_read_acquire.lua)
--
-- Returns one integer per hold, in order: 1 when every level of the owner's read hold was still there and
-- now lives at least the watchdog timeout; 0 when the hold is gone, or a level of it expired (lost).
local ttl = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS do
  local owner = ARGV[2 * i]
  local n = tonumber(redis.call('hget', KEYS[i], owner))
  local ok = 0
  if n and n > 0 then
    ok = 1
    local prefix = ARGV[2 * i + 1] .. ':' .. owner .. ':rwlock_timeout:'
    for j = 1, n do
      if redis.call('pexpire', prefix .. j, ttl) == 0 then
        ok = 0
      end
    end
    if ok == 1 and redis.call('pttl', KEYS[i]) < ttl then
      redis.call('pexpire', KEYS[i], ttl)
    end
  end
  renewed[i] = ok
end
return renewed
