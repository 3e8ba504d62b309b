-- Renew many holds of reentrant locks at once: the watchdog's batch. With a timeout of 0 it renews
-- nothing and only checks that the holds are there (holds with a lease, which the watchdog watches for a
-- loss).
--
-- KEYS[i]    the i-th hold's lock hash
-- ARGV[1]    the watchdog timeout, in milliseconds, or 0 to check only
-- ARGV[i+1]  the i-th hold's owner field: a reentrant lock's owner, or a write lock's "<owner>:write"
--
-- Returns one integer per hold, in order: 1 when the owner still holds the lock (renewing: its time to
-- live is now at least the watchdog timeout; a longer one is kept), 0 when the hold is gone (it expired, was
-- deleted, or Redis lost it; or the key is now another kind's, see lib/kinds.lua): the hold is lost, and
-- nothing is written for it. One hold's key, whatever it holds, never fails the others.

-- holds reports whether field holds lock: lock is a hash with the field, and of the field's kind: a
-- read-write lock's (with a 'mode' field) for a writer, a reentrant lock's otherwise.
local function holds(lock, field)
  if redis.call('type', lock)['ok'] ~= 'hash' or redis.call('hexists', lock, field) == 0 then
    return false
  end
  return (redis.call('hexists', lock, 'mode') == 1) == (string.sub(field, -6) == ':write')
end

local ttl = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS do
  if holds(KEYS[i], ARGV[i + 1]) then
    if ttl > 0 and redis.call('pttl', KEYS[i]) < ttl then
      redis.call('pexpire', KEYS[i], ttl)
    end
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
