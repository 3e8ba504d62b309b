-- Acquire, re-enter or queue for a fair (first come, first served) reentrant lock, in Redisson's
-- RedissonFairLock layout, with Redisson's scores (see lib/queue.lua).
--
-- KEYS[1]  the lock: a hash, field = owner ("<clientUUID>:<token>"), value = hold count
-- KEYS[2]  the queue, redisson_lock_queue:{<name>}: a list of waiting owners, oldest first
-- KEYS[3]  the Redisson scores, redisson_lock_timeout:{<name>} (see lib/queue.lua)
-- KEYS[4]  relock's waiters' alive times, relock_lock_alive:{<name>} (see lib/queue.lua)
-- KEYS[5]  the channel prefix, redisson_lock__channel:{<name>}; a waiter listens on "<prefix>:<owner>"
-- KEYS[6]  the undone attempts' marks, relock_undone:{<name>} (see lib/undone.lua)
-- KEYS[7]  a ReadWriteLock's waiting priority writers, relock_rwlock_writers:{<name>}, read only: they make
--          the name a ReadWriteLock's
-- KEYS[8]  an Election's stream of leaders, relock_election:{<name>}, read only: it makes the name an
--          Election's (see ARGV[9])
-- KEYS[9]  a scratch set, relock_lock_shift:{<name>}, which lives only within the run (see lib/queue.lua)
-- KEYS[10] fenced locks only: the fencing token counter, redisson_lock_token:{<name>}
-- ARGV[1]  how long the hold lives, in milliseconds (the lease, or the watchdog timeout), with the end of
--          its budget on Redis's clock when it has one (see hold_ttl in lib/clock.lua)
-- ARGV[2]  the owner field
-- ARGV[3]  how long the owner stays alive without a refresh, in milliseconds (the watchdog timeout)
-- ARGV[4]  '1' to join the queue when the lock cannot be had now; '0' for a single attempt, which never
--          joins it
-- ARGV[5]  Redisson's fair lock wait time (Config.fairLockWaitTimeout), in milliseconds
-- ARGV[6]  the message that wakes a waiter ("0")
-- ARGV[7]  how to announce: 'publish', or 'spublish' on a cluster (sharded pub/sub)
-- ARGV[8]  the attempt's id
-- ARGV[9]  '1' for an Election's candidate: the stream of leaders is its own, and each owner holds the
--          lock once at most (an owner that holds it already gets its hold back, with no new level, so
--          one Resign ends it); '' for a FairLock, which re-enters, adding one
--
-- Dead waiters are dropped from the head of the queue first. An owner that has an alive entry but is
-- missing from the queue (a Redisson client dropped it, or it was removed by hand) goes back to the head,
-- where it was. When the lock is free but the head is another waiter, that one is woken.
--
-- Returns {1, holdCount, token, clock} when the owner now holds the lock (see rlock_acquire.lua; token is 0
--                                when the lock is not fenced; with ARGV[9] '1', the count it had, if it held).
--                                The owner's queue entries are gone, and wait is
--                                subtracted from every remaining score.
--         {0, wait, 0}           when it does not. wait is how long (ms) the caller may sleep before trying
--                                again unless notified on its channel: for the head of the queue, the
--                                lock's remaining time to live (-1: the key has no expiry, wait for the
--                                notification); for a waiter behind it, the time until the head would
--                                count as dead if it stopped refreshing.
--         {-2, 0, 0}             when this attempt was undone before it arrived (see lib/undone.lua):
--                                nothing changed, and nobody waits for the reply.
--         {-3, 0, 0}             when ARGV[1]'s budget had ended (see hold_ttl): nothing changed.
--         an error RELOCK_...    when the name is in use by another kind (see lib/kinds.lua): a key that
--                                is no lock, a read-write lock, or, unless the owner holds the lock
--                                already, a ReadWriteLock's waiting writers or (for a FairLock) an
--                                Election. Nothing changed.

-- A free name that nobody queues for, the common case, is taken here before the script defines any
-- function (see rlock_acquire.lua), when the hold has no budget: one EXISTS finds no lock, queue, scores,
-- alive times, undone marks nor another kind's companion (an Election's stream, which its own candidates
-- may find, makes them take the general code below), and the grant is first_hold's (lib/hold.lua), as the
-- code below would make it.
local plain = tonumber(ARGV[1])
-- @common: the common case, which TestCommonCaseDoesWhatTheGeneralCodeDoes turns off
if plain and redis.call('exists', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], plain)
  local token = 0
  if KEYS[10] then
    token = redis.call('incr', KEYS[10])
  end
  return {1, 1, token, 0}
end

-- @include lib/clock.lua
-- @include lib/alive.lua
-- @include lib/queue.lua
-- @include lib/hold.lua
-- @include lib/undone.lua
-- @include lib/kinds.lua

if undone(KEYS[6], ARGV[2], ARGV[8]) then
  return {-2, 0, 0}
end
local t = key_type(KEYS[1])
local refused = lock_refusal(KEYS[1], t, false)
if refused then
  return refused
end
local owner = ARGV[2]
if t ~= 'hash' or redis.call('hexists', KEYS[1], owner) == 0 then
  local election = KEYS[8]
  if ARGV[9] == '1' then
    election = KEYS[7] -- the Election's own stream is no other kind's
  end
  if redis.call('exists', KEYS[7], election) > 0 then
    return refusal('WRONGKIND', other_kind(KEYS[7], 'rwlock', election, 'election'), t)
  end
end
local ttl, at, budgeted = hold_ttl(ARGV[1])
if ttl <= 0 then -- the hold's budget is spent (see hold_ttl in lib/clock.lua)
  return {-3, 0, 0}
end
local now = now_ms()
local aliveTTL, wait = tonumber(ARGV[3]), tonumber(ARGV[5])
local free = t == 'none'

local head = live_head(KEYS[2], KEYS[3], KEYS[4], now)
local pos = redis.call('lpos', KEYS[2], owner) or nil -- nil, not false, when it is not queued
if not pos and redis.call('zscore', KEYS[4], owner) then
  redis.call('lpush', KEYS[2], owner)
  pos, head = 0, owner
end

if free then
  if not head or head == owner then
    if head then
      redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], owner)
    redis.call('zrem', KEYS[4], owner)
    shorten_waits(KEYS[3], KEYS[9], nil, wait)
    return first_hold(KEYS[1], owner, ttl, at, KEYS[10], budgeted)
  end
  -- The head may be asleep: its notification went to a dead waiter just dropped, or never came (a
  -- Redisson waiter ahead of it gave up, which wakes nobody).
  redis.call(ARGV[7], KEYS[5] .. ':' .. head, ARGV[6])
elseif redis.call('hexists', KEYS[1], owner) == 1 then
  if ARGV[9] == '1' then
    return hold_again(KEYS[1], owner, ttl, at, KEYS[10], budgeted)
  end
  return reenter(KEYS[1], owner, ttl, at, KEYS[10], budgeted)
end

-- Not acquired: refresh the owner's entries, or join the queue at its end, with Redisson's score.
local queued = pos ~= nil
if queued then
  keep_alive(KEYS[4], owner, now, aliveTTL)
  raise_score(KEYS[3], KEYS[4], owner, pos, wait)
elseif ARGV[4] == '1' then
  local last = redis.call('lindex', KEYS[2], -1)
  local base = last and redis.call('zscore', KEYS[3], last)
  if base then
    base = tonumber(base) - now
  else
    base = redis.call('pttl', KEYS[1])
  end
  redis.call('zadd', KEYS[3], base + wait + now, owner)
  redis.call('rpush', KEYS[2], owner)
  keep_alive(KEYS[4], owner, now, aliveTTL)
  queued = true
end

if queued and head and head ~= owner then
  local until_ms = redis.call('zscore', KEYS[4], head) or redis.call('zscore', KEYS[3], head)
  return {0, math.max(tonumber(until_ms) - now, 0), 0}
end
local pttl = redis.call('pttl', KEYS[1])
if pttl == -2 then
  pttl = 0
end
return {0, pttl, 0}
