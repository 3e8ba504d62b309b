-- Renew many read holds at once: the watchdog's batch. Only the owner's own hold levels are extended, so a
-- reader whose Client stopped renewing expires even while other readers keep the lock alive. With a
-- timeout of 0 it renews nothing and only checks that the holds are there (read holds with a lease).
--
-- KEYS[i]      the i-th hold's lock hash (see rw_read_acquire.lua)
-- ARGV[1]      the time to live, in milliseconds (the watchdog timeout, or less: what is left of a
--              budget; or Extend's lease), with the end of the budget on Redis's clock when the holds
--              have one (see hold_ttl in lib/clock.lua); or 0 to check only
-- ARGV[2i]     the i-th hold's owner field
-- ARGV[2i+1]   the i-th hold's lock tag, which starts its read-hold keys (see rw_read_acquire.lua)
--
-- Returns one integer per hold, in order: renewing, 1 when every level of the owner's read hold was still
-- there and now lives at least ARGV[1] ms (a level, or the hash, that lives longer keeps its time to
-- live), 0 when the hold is gone or a level of it expired (lost); checking, 1 when a level of the hold is
-- still there (see lock_read.lua), 0 otherwise. A key that is no read-write lock's holds no reader (see
-- lib/kinds.lua): 2 for a reentrant lock's hash, 3 for a key that is no lock; the other holds go on.
-- @include lib/clock.lua
-- @include lib/readers.lua

local ttl, at = hold_ttl(ARGV[1])
local renewed = {}
for i = 1, #KEYS do
  local owner = ARGV[2 * i]
  local n = nil
  local ok = 0
  local t = redis.call('type', KEYS[i])['ok']
  if t == 'hash' and redis.call('hexists', KEYS[i], 'mode') == 1 then
    n = tonumber(redis.call('hget', KEYS[i], owner))
  elseif t == 'hash' then
    ok = 2
  elseif t ~= 'none' then
    ok = 3
  end
  if n and n > 0 and ttl <= 0 then -- a check (or a budget spent, see hold_ttl: nothing to renew)
    if read_hold_alive(ARGV[2 * i + 1], owner, n) then
      ok = 1
    end
  elseif n and n > 0 then
    ok = 1
    local prefix = ARGV[2 * i + 1] .. ':' .. owner .. ':rwlock_timeout:'
    for j = 1, n do
      -- A level that lives longer already (a reentry's longer lease) keeps its time to live: a renewal, or
      -- Extend with a shorter lease, never cuts a hold short behind its Client.
      local left = redis.call('pttl', prefix .. j)
      if left == -2 then
        ok = 0
      elseif left >= 0 and left < ttl then
        expire_hold(prefix .. j, ttl, at)
      end
    end
    -- In write mode the hash lives by the write hold (the reader is the writer: see hold in
    -- rw_read_acquire.lua).
    if ok == 1 and redis.call('pttl', KEYS[i]) < ttl and redis.call('hget', KEYS[i], 'mode') ~= 'write' then
      expire_hold(KEYS[i], ttl, at)
    end
  end
  renewed[i] = ok
end
return renewed
