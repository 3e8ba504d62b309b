-- Acquire or re-enter the write lock of a read-write lock (layout: see rw_read_acquire.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiting writers that asked for priority (see rw_read_acquire.lua)
-- KEYS[3]  the undone attempts' marks, relock_undone:{<name>} (see lib/undone.lua)
-- KEYS[4]  a FairLock's queue, redisson_lock_queue:{<name>}, read only (see rw_read_acquire.lua)
-- KEYS[5]  an Election's stream of leaders, relock_election:{<name>}, read only (see rw_read_acquire.lua)
-- KEYS[6]  fenced locks only: the fencing token counter, redisson_lock_token:{<name>}
-- ARGV[1]  how long the hold lives, in milliseconds, with the end of its budget on Redis's clock when it
--          has one (see hold_ttl in lib/clock.lua)
-- ARGV[2]  the owner's writer field, "<owner>:write"
-- ARGV[3]  the owner's reader field, "<owner>"
-- ARGV[4]  with priority, how long the writer's waiting entry lives unrefreshed (ms); '' without
-- ARGV[5]  '1' to join the waiting writers (priority, and willing to wait); '0' otherwise
-- ARGV[6]  the lock's tag, which starts its read-hold keys (see rw_read_acquire.lua)
-- ARGV[7]  the attempt's id
--
-- Returns {1, writeCount, token, clock} when the owner now holds the write lock (token: 0 when not fenced;
--                                clock: as an acquisition's, see lib/hold.lua);
--         {0, wait, 0}           when it must wait: wait is how long the lock may still be held unless
--                                renewed, in milliseconds (-1: no bound): the writer's time to live, or
--                                the longest of the live readers' (see read_hold_ttl in lib/readers.lua);
--         {-1, 0, 0}             when the owner holds the read lock: the write lock would wait for it
--                                forever (an upgrade), so the caller fails at once.
--         {-2, 0, 0}             when this attempt was undone before it arrived (see lib/undone.lua):
--                                nothing changed, and nobody waits for the reply.
--         {-3, 0, 0}             when ARGV[1]'s budget had ended (see hold_ttl): nothing changed.
--         an error RELOCK_...    when the name is in use by another kind (see rw_read_acquire.lua).
--                                Nothing changed.

-- A free name, the common case, is taken here before the script defines any function (see
-- rlock_acquire.lua), when the hold has no budget: one EXISTS finds no lock, undone marks nor another kind's
-- companion, and the grant is the code's below for a free lock (the write mode, the writer's first hold,
-- first_hold in lib/hold.lua).
local plain = tonumber(ARGV[1])
-- @common: the common case, which TestCommonCaseDoesWhatTheGeneralCodeDoes turns off
if plain and redis.call('exists', KEYS[1], KEYS[3], KEYS[4], KEYS[5]) == 0 then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('zrem', KEYS[2], ARGV[2])
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], plain)
  local token = 0
  if KEYS[6] then
    token = redis.call('incr', KEYS[6])
  end
  return {1, 1, token, 0}
end

-- @include lib/clock.lua
-- @include lib/readers.lua
-- @include lib/hold.lua
-- @include lib/undone.lua
-- @include lib/kinds.lua

if undone(KEYS[3], ARGV[2], ARGV[7]) then
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
local writer = ARGV[2]

local mode = redis.call('hget', KEYS[1], 'mode')
local readers_left = 0 -- in read mode: how long the live readers may still hold the lock (-1: no bound)
if mode == 'read' then
  local own = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
  if own and read_hold_alive(ARGV[6], ARGV[3], own) then
    return {-1, 0, 0}
  end
  -- Readers whose every hold level has expired (their Client stopped renewing, their lease ran out) no
  -- longer count. The others hold the lock for readers_left at most, unless renewed.
  local live = false
  local fields = redis.call('hkeys', KEYS[1])
  for _, field in ipairs(fields) do
    if field ~= 'mode' then
      local left = read_hold_ttl(ARGV[6], field, tonumber(redis.call('hget', KEYS[1], field)) or 0)
      if left == 0 then
        redis.call('hdel', KEYS[1], field)
      else
        live = true
        if left < 0 or readers_left < 0 then
          readers_left = -1
        elseif left > readers_left then
          readers_left = left
        end
      end
    end
  end
  if not live then
    redis.call('del', KEYS[1])
    mode = false
  end
end
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('zrem', KEYS[2], writer)
  return first_hold(KEYS[1], writer, ttl, at, KEYS[6], budgeted)
end
if mode == 'write' and redis.call('hexists', KEYS[1], writer) == 1 then
  return reenter(KEYS[1], writer, ttl, at, KEYS[6], budgeted)
end
if ARGV[4] ~= '' and ARGV[5] == '1' then
  local now = now_ms()
  redis.call('zadd', KEYS[2], now + tonumber(ARGV[4]), writer)
end
if mode == 'read' then
  return {0, readers_left, 0}
end
return {0, redis.call('pttl', KEYS[1]), 0}
