-- Keep many of a Client's fair lock waiters alive at once: the watchdog's batch for FairLock queues.
--
-- For the i-th waiter, KEYS[5i-4..5i] are its lock's keys and ARGV[4i-2..4i+1] its arguments:
-- KEYS     the lock hash, the queue, the Redisson scores, relock's waiters' alive times and the channel
--          prefix (see fair_acquire.lua)
-- ARGV     the owner field; Redisson's fair lock wait time (ms); the message that wakes a waiter ("0");
--          how to announce: 'publish', or 'spublish' on a cluster
-- ARGV[1]  how long a waiter stays alive without a refresh, in milliseconds (the watchdog timeout)
--
-- A waiter with an alive entry lives ARGV[1] more milliseconds (Redis's clock), and its Redisson score is
-- raised to keep Redisson's clients from dropping it (see raise_score in lib/queue.lua). One that is
-- missing from the queue (a Redisson client dropped it from the head, or it was removed by hand) goes
-- back to the head; if the lock is free, it is woken to take it. A waiter without an alive entry got the
-- lock, left, or was dropped as dead: it is not queued again.
--
-- Returns one integer per waiter, in order: 1 when it was refreshed, 0 when it is gone.
-- @include lib/clock.lua
-- @include lib/alive.lua
-- @include lib/queue.lua

local now = now_ms()
local ttl = tonumber(ARGV[1])
local refreshed = {}
for i = 1, #KEYS / 5 do
  local lock, queue, timeouts, alive, channel = KEYS[5 * i - 4], KEYS[5 * i - 3], KEYS[5 * i - 2],
    KEYS[5 * i - 1], KEYS[5 * i]
  local owner, wait, message, publish = ARGV[4 * i - 2], tonumber(ARGV[4 * i - 1]), ARGV[4 * i], ARGV[4 * i + 1]
  if redis.call('zscore', alive, owner) then
    keep_alive(alive, owner, now, ttl)
    local pos = redis.call('lpos', queue, owner)
    if not pos then
      redis.call('lpush', queue, owner)
      pos = 0
      if redis.call('exists', lock) == 0 then
        redis.call(publish, channel .. ':' .. owner, message)
      end
    end
    raise_score(timeouts, alive, owner, pos, wait)
    refreshed[i] = 1
  else
    refreshed[i] = 0
  end
end
return refreshed
