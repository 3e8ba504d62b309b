-- Read the whole state of a lock in one snapshot, changing nothing: for Client.Inspect and the relock
-- command's operator tools. It understands every layout relock writes (RLock, FairLock, ReadWriteLock).
--
-- KEYS[1]  the lock key
-- KEYS[2]  a fair lock's queue, redisson_lock_queue:{<name>} (see fair_acquire.lua)
-- KEYS[3]  a fair lock's Redisson scores, redisson_lock_timeout:{<name>}
-- KEYS[4]  a read-write lock's waiting priority writers, relock_rwlock_writers:{<name>}
-- KEYS[5]  the fencing token counter, redisson_lock_token:{<name>}
-- KEYS[6]  a fair lock's relock waiters' alive times, relock_lock_alive:{<name>}
-- ARGV[1]  the lock's tag, which starts a read-write lock's read-hold keys (see rw_read_acquire.lua)
-- ARGV[2]  the most queue entries to return (the lengths are returned whole)
--
-- Returns {type, pttl, now, fields, readTTLs, queueLen, queue, deadlines, writersLen, writers, token}:
--   type       the type of KEYS[1]: 'none', 'hash', or another type (then fields and readTTLs are empty)
--   pttl       PTTL of KEYS[1] (ms; -1: no expiry; -2: no key)
--   now        Redis's clock, in ms
--   fields     the lock hash, flat: field, value, field, value...
--   readTTLs   for each field of fields, in order: when the hash has a 'mode' field and the field is a
--              reader's, the longest PTTL of its read-hold keys; -3 otherwise
--   queueLen   LLEN KEYS[2]
--   queue      the first ARGV[2] entries of KEYS[2]
--   deadlines  for those entries, in queue order, the time (ms) from which each counts as dead when at the
--              head: a relock waiter's alive time in KEYS[6] (Redis's clock), another's Redisson score in
--              KEYS[3]; -1 when it has neither
--   writersLen ZCARD KEYS[4]
--   writers    the first ARGV[2] members of KEYS[4] with their scores (ms, Redis's clock), flat
--   token      the fencing counter's value, '' when there is none
-- @include lib/clock.lua

local now = now_ms()
local limit = tonumber(ARGV[2])

local kind = redis.call('type', KEYS[1])['ok']
local fields, readTTLs = {}, {}
if kind == 'hash' then
  fields = redis.call('hgetall', KEYS[1])
  local rw = redis.call('hexists', KEYS[1], 'mode') == 1
  for i = 1, #fields, 2 do
    local ttl = -3
    local field = fields[i]
    if rw and field ~= 'mode' and string.sub(field, -6) ~= ':write' then
      local n = tonumber(fields[i + 1]) or 0
      ttl = -2
      for level = 1, math.min(n, 1000) do
        local p = redis.call('pttl', ARGV[1] .. ':' .. field .. ':rwlock_timeout:' .. level)
        if p == -1 or (p > ttl and ttl ~= -1) then
          ttl = p
        end
      end
    end
    readTTLs[#readTTLs + 1] = ttl
  end
end

local queue = redis.call('lrange', KEYS[2], 0, limit - 1)
local deadlines = {}
for i, owner in ipairs(queue) do
  deadlines[i] = tonumber(redis.call('zscore', KEYS[6], owner) or redis.call('zscore', KEYS[3], owner)) or -1
end
local token = redis.call('get', KEYS[5]) or ''
return {kind, redis.call('pttl', KEYS[1]), now, fields, readTTLs, redis.call('llen', KEYS[2]), queue,
  deadlines, redis.call('zcard', KEYS[4]), redis.call('zrange', KEYS[4], 0, limit - 1, 'WITHSCORES'), token}
