-- Renew many holds of reentrant locks at once: the watchdog's batch. With a timeout of 0 it renews
-- nothing and only checks that the holds are there (holds with a lease, which the watchdog watches for a
-- loss).
--
-- KEYS[i]    the i-th hold's lock hash
-- ARGV[1]    the time to live, in milliseconds (the watchdog timeout, or less: what is left of a budget; or
--            Extend's lease), with the end of the budget on Redis's clock when the holds have one (see
--            hold_ttl in lib/clock.lua); or 0 to check only
-- ARGV[i+1]  the i-th hold's owner field: a reentrant lock's owner, or a write lock's "<owner>:write"
--
-- Returns one integer per hold, in order: 1 when the owner still holds the lock (renewing: its time to
-- live is now at least ARGV[1]'s; a longer one is kept), 0 when the hold is gone (it expired, was
-- deleted, or Redis lost it), 2 when the key is now a lock of another kind (a read-write lock's for a
-- reentrant lock's hold, or the other way round), 3 when it is no lock at all (see lib/kinds.lua). The
-- hold is lost unless 1, and nothing is written for it. One hold's key, whatever it holds, never fails
-- the others.
-- @include lib/clock.lua

-- held returns the i-th hold's code before renewal: 1 when field holds lock, a hash of the field's kind (a
-- read-write lock's, with a 'mode' field, for a writer; a reentrant lock's otherwise); else 0, 2 or 3.
local function held(lock, field)
  local t = redis.call('type', lock)['ok']
  if t == 'none' then
    return 0
  elseif t ~= 'hash' then
    return 3
  elseif (redis.call('hexists', lock, 'mode') == 1) ~= (string.sub(field, -6) == ':write') then
    return 2
  end
  return redis.call('hexists', lock, field)
end

local ttl, at = hold_ttl(ARGV[1])
local renewed = {}
for i = 1, #KEYS do
  local code = held(KEYS[i], ARGV[i + 1])
  if code == 1 then
    if ttl > 0 and redis.call('pttl', KEYS[i]) < ttl then
      expire_hold(KEYS[i], ttl, at)
    end
  end
  renewed[i] = code
end
return renewed
