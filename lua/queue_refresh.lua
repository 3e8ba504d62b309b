-- Keep many waiting owners' entries alive at once: the watchdog's batch for a write lock's waiting writers
-- (relock_rwlock_writers:{<name>}) and an RLock's waiting owners (relock_lock_waiters:{<name>}). A
-- FairLock's waiters have their own (fair_refresh.lua).
--
-- KEYS[i]    the sorted set of the i-th entry, scored with the time until which each owner counts as alive
-- ARGV[1]    how long an entry lives without a refresh, in milliseconds
-- ARGV[i+1]  the i-th entry's owner field
--
-- Returns one integer per entry, in order: 1 when the entry was still there and now lives ARGV[1] more
-- milliseconds (Redis's clock), 0 when it is gone (dropped as dead, or its owner got the lock or left).
-- @include lib/clock.lua

local alive = now_ms() + tonumber(ARGV[1])
local refreshed = {}
for i = 1, #KEYS do
  local owner = ARGV[i + 1]
  refreshed[i] = 0
  if redis.call('zscore', KEYS[i], owner) then
    redis.call('zadd', KEYS[i], alive, owner)
    -- A set that expires (an RLock's waiting owners, lib/alive.lua) lives as long as its entries.
    local ttl = redis.call('pttl', KEYS[i])
    if ttl >= 0 and ttl < tonumber(ARGV[1]) then
      redis.call('pexpire', KEYS[i], ARGV[1])
    end
    refreshed[i] = 1
  end
end
return refreshed
