-- Acquire or re-enter a reentrant lock, in Redisson's RLock layout.
--
-- KEYS[1]  the lock: a hash whose field is the owner ("<clientUUID>:<token>") and whose value is the hold count
-- KEYS[2]  the undone attempts' marks, relock_undone:{<name>} (see lib/undone.lua)
-- KEYS[3]  a FairLock's queue, redisson_lock_queue:{<name>}, read only: its waiters make the name a FairLock's
-- KEYS[4]  a ReadWriteLock's waiting priority writers, relock_rwlock_writers:{<name>}, read only: likewise
-- KEYS[5]  an Election's stream of leaders, relock_election:{<name>}, read only: likewise
-- KEYS[6]  relock's waiting owners, relock_lock_waiters:{<name>} (see lib/waiters.lua)
-- KEYS[7]  fenced locks only: the fencing token counter, redisson_lock_token:{<name>} (Redisson's RFencedLock
--          counter). It has no expiry, so tokens keep increasing across the lock's expiries.
-- ARGV[1]  how long the hold lives, in milliseconds (the lease, or the Client's watchdog timeout), with the
--          end of its budget on Redis's clock when it has one (see hold_ttl in lib/clock.lua)
-- ARGV[2]  the owner field
-- ARGV[3]  the attempt's id
-- ARGV[4]  '1' when the owner waits (it joins the waiting owners if it cannot have the lock now, and
--          leaves them when it gets it), '0' for an attempt made before waiting, or alone
-- ARGV[5]  how long a waiting owner stays alive without a refresh, in milliseconds (the watchdog timeout)
--
-- Returns {1, holdCount, token, clock} when the owner now holds the lock: a first acquisition has count 1
--                              and, if fenced, a new token (the counter incremented); a reentry has the new
--                              count and the current token (the one its first acquisition got). token is 0
--                              when the lock is not fenced. clock is Redis's clock (ms) for a hold with a
--                              budget, else 0 (see lib/hold.lua).
--         {0, pttl, names}     when another owner holds it; pttl is the lock's remaining time to live in
--                              milliseconds, or -1 when the key has no expiry (a waiter then waits for the
--                              release message alone). A waiting owner (ARGV[4]) is among the waiting
--                              owners now, alive ARGV[5] ms. names is 1 when the holder's release wakes a
--                              waiting owner by name (see holder_names in lib/waiters.lua), 0 when it may
--                              publish the unlock message alone (a Redisson client's release).
--         {-2, 0, 0}           when this attempt was undone before it arrived (see lib/undone.lua):
--                              nothing changed, and nobody waits for the reply.
--         {-3, 0, 0}           when ARGV[1]'s budget had ended (see hold_ttl): nothing changed.
--         an error RELOCK_...  when the name is in use by another kind (see lib/kinds.lua): a key that is
--                              no lock, a read-write lock, or, unless the owner holds the lock already, a
--                              FairLock's waiters, a ReadWriteLock's waiting writers or an Election.
--                              Nothing changed.

-- A free name, the common case, answers every check below at once: no key of the lock, its undone marks
-- or another kind's companions exists (one EXISTS, where each check would read its own key).
local free = redis.call('exists', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]) == 0

-- A free name taken for a hold without a budget (a plain time to live: see hold_ttl in lib/clock.lua) is
-- granted here, as first_hold (lib/hold.lua) does below, before the script defines any function: Redis
-- runs a script's whole text on every run, making a closure of each function it defines, which cost about
-- as much as the rest of such a run (5 of 21 µs measured).
local plain = tonumber(ARGV[1])
-- @common: the common case, which TestCommonCaseDoesWhatTheGeneralCodeDoes turns off
if free and plain then
  if ARGV[4] == '1' then
    redis.call('zrem', KEYS[6], ARGV[2])
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], plain)
  local token = 0
  if KEYS[7] then
    token = redis.call('incr', KEYS[7])
  end
  return {1, 1, token, 0}
end

-- @include lib/clock.lua
-- @include lib/alive.lua
-- @include lib/waiters.lua
-- @include lib/hold.lua
-- @include lib/undone.lua
-- @include lib/kinds.lua

if not free and undone(KEYS[2], ARGV[2], ARGV[3]) then
  return {-2, 0, 0}
end

local t = 'none'
if not free then
  t = key_type(KEYS[1])
end
local refused = lock_refusal(KEYS[1], t, false)
if refused then
  return refused
end
local ttl, at, budgeted = hold_ttl(ARGV[1])
if ttl <= 0 then -- the hold's budget is spent (see hold_ttl in lib/clock.lua)
  return {-3, 0, 0}
end
local waits = ARGV[4] == '1'
if t == 'hash' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  if waits then
    redis.call('zrem', KEYS[6], ARGV[2])
  end
  return reenter(KEYS[1], ARGV[2], ttl, at, KEYS[7], budgeted)
end
if not free and redis.call('exists', KEYS[3], KEYS[4], KEYS[5]) > 0 then
  return refusal('WRONGKIND', other_kind(KEYS[3], 'fairlock', KEYS[4], 'rwlock', KEYS[5], 'election'), t)
end
if t == 'none' then
  if waits then
    redis.call('zrem', KEYS[6], ARGV[2])
  end
  return first_hold(KEYS[1], ARGV[2], ttl, at, KEYS[7], budgeted)
end
if waits then
  keep_alive(KEYS[6], ARGV[2], now_ms(), tonumber(ARGV[5]))
end
return {0, redis.call('pttl', KEYS[1]), holder_names(KEYS[1], t)}
