-- Acquire or re-enter the read lock of a read-write lock, in Redisson's RReadWriteLock layout.
--
-- KEYS[1]  the lock: a hash with field 'mode' ('read' or 'write'), a field per reader "<owner>" holding its
--          read count, and the writer's field "<owner>:write" holding its write count. Each read hold
--          level n has its own key <tag>:<owner>:rwlock_timeout:<n> (tag: ARGV[4]), which expires on its
--          own: a reader whose Client stops renewing is gone when its keys are, whatever others do.
-- KEYS[2]  the waiting writers that asked for priority, relock_rwlock_writers:{<name>}: a sorted set of
--          owners scored with the time (ms, Redis's clock) until which each counts as alive
-- KEYS[3]  the undone attempts' marks, relock_undone:{<name>} (see lib/undone.lua)
-- KEYS[4]  a FairLock's queue, redisson_lock_queue:{<name>}, read only: its waiters make the name a FairLock's
-- KEYS[5]  an Election's stream of leaders, relock_election:{<name>}, read only: it makes the name an
--          Election's
-- ARGV[1]  how long the hold lives, in milliseconds, with the end of its budget on Redis's clock when it
--          has one (see hold_ttl in lib/clock.lua)
-- ARGV[2]  the owner field (the reader's field)
-- ARGV[3]  the same owner's writer field, "<owner>:write": a writer may take the read lock (downgrade)
-- ARGV[4]  the lock's base: "{<name>}", or the name itself when it holds a "{" (Redisson's suffixName), so that
--          the read-hold keys share the lock's slot
-- ARGV[5]  the attempt's id
--
-- Returns {1, readCount, 0, clock} when the owner now holds the read lock (first or reentrant); clock is
--                           as an acquisition's (see lib/hold.lua);
--         {0, wait, 0}      when it must wait: wait (ms) is how long it may sleep before trying again
--                           unless notified: the lock's remaining time to live when a writer holds it
--                           (-1: no expiry), or the time until the first live priority writer's entry
--                           expires when it yields to waiting writers.
--         {-2, 0, 0}        when this attempt was undone before it arrived (see lib/undone.lua):
--                           nothing changed, and nobody waits for the reply.
--         {-3, 0, 0}        when ARGV[1]'s budget had ended (see hold_ttl): nothing changed.
--         an error RELOCK_... when the name is in use by another kind (see lib/kinds.lua): a key that is
--                           no lock, a reentrant lock's hash, or, while the lock's key is absent, a
--                           FairLock's waiters or an Election. Nothing changed.

-- A free name, the common case, is taken here before the script defines any function (see
-- rlock_acquire.lua), when the hold has no budget: one EXISTS finds no lock, waiting priority writers,
-- undone marks nor another kind's companion, and the grant is the code's below for a free lock (the read
-- mode, the reader's first level with its key, the lock's time to live).
local plain = tonumber(ARGV[1])
-- @common: the common case, which TestCommonCaseDoesWhatTheGeneralCodeDoes turns off
if plain and redis.call('exists', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]) == 0 then
  redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)
  redis.call('set', ARGV[4] .. ':' .. ARGV[2] .. ':rwlock_timeout:1', 1, 'PX', plain)
  redis.call('pexpire', KEYS[1], plain)
  return {1, 1, 0, 0}
end

-- @include lib/clock.lua
-- @include lib/readers.lua
-- @include lib/hold.lua
-- @include lib/undone.lua
-- @include lib/kinds.lua

if undone(KEYS[3], ARGV[2], ARGV[5]) then
  return {-2, 0, 0}
end
local t = key_type(KEYS[1])
local refused = rw_acquire_refusal(KEYS[1], t, KEYS[5], KEYS[4])
if refused then
  return refused
end

local ttl, at, budgeted = hold_ttl(ARGV[1])
if ttl <= 0 then -- the hold's budget is spent (see hold_ttl in lib/clock.lua)
  return {-3, 0, 0}
end
local owner = ARGV[2]
local prefix = ARGV[4] .. ':' .. owner .. ':rwlock_timeout:'

-- A reader whose every level expired (its lease ran out while another reader kept the hash) holds nothing:
-- its field goes, and it starts again at level 1, so that its count is its live holds.
local stale = tonumber(redis.call('hget', KEYS[1], owner))
if stale and not read_hold_alive(ARGV[4], owner, stale) then
  redis.call('hdel', KEYS[1], owner)
end

-- The hold's level key lives ttl ms (or until at); so does the lock's hash, at least, except in write mode:
-- there the hash lives by the write hold, and only the writer itself reads (a downgrade). A read hold taken
-- under one's own write lock never makes the write lock outlive its lease or its renewals: other readers
-- get in as soon as the write hold ends. The read hold outlives the write hold only when the write lock is
-- released (rw_write_release.lua gives the hash the read hold's time to live); should the write hold end
-- otherwise (its lease ran out, its Client stopped renewing), the read hold ends with it.
local function hold(writing)
  local n = redis.call('hincrby', KEYS[1], owner, 1)
  if at then
    redis.call('set', prefix .. n, 1, 'PXAT', at)
  else
    redis.call('set', prefix .. n, 1, 'PX', ttl)
  end
  if not writing then
    extend(KEYS[1], ttl, at)
  end
  return {1, n, 0, grant_clock(budgeted)}
end

-- Writers that asked for priority and are still alive make new readers wait (a reader already holding
-- may re-enter: it would otherwise wait on itself).
local function writerWaiting()
  local now = now_ms()
  redis.call('zremrangebyscore', KEYS[2], '-inf', now)
  local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
  if first[2] then
    return math.max(tonumber(first[2]) - now, 0)
  end
  return nil
end

local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
  local wait = writerWaiting()
  if wait then
    return {0, wait, 0}
  end
  redis.call('hset', KEYS[1], 'mode', 'read')
  return hold()
end
if mode == 'read' then
  if redis.call('hexists', KEYS[1], owner) == 0 then
    local wait = writerWaiting()
    if wait then
      local pttl = redis.call('pttl', KEYS[1])
      if pttl > 0 and pttl < wait then
        wait = pttl
      end
      return {0, wait, 0}
    end
  end
  return hold()
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
  return hold(true)
end
return {0, redis.call('pttl', KEYS[1]), 0}
