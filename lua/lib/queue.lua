-- A fair lock's queue, shared with Redisson's RedissonFairLock, is three keys in the lock's slot:
--   queue    redisson_lock_queue:{<name>}: a list of the waiting owners, oldest first.
--   timeouts redisson_lock_timeout:{<name>}: a sorted set scoring every queued owner, in Redisson's
--            arithmetic (ms): a waiter joins with (the last waiter's score - now, or the lock's PTTL when
--            nobody is queued) + wait + now, each acquisition subtracts wait from every remaining score, and
--            a waiter that gives up subtracts wait from the scores of those behind it. wait is Redisson's
--            Config.fairLockWaitTimeout (FairLockWaitTimeout). Redisson drops the head while its score is not
--            after now, and fails on a queued owner without a score: every queued owner has one.
--   alive    relock_lock_alive:{<name>}: relock's waiters only, scored with the time (ms, Redis's clock)
--            until which each counts as alive. Their Clients refresh it; the key lives as long as its
--            longest-lived entry.
-- Only the head of the queue may take a free lock. Redisson's clients never read the alive set, so a
-- relock waiter keeps its Redisson score high enough that their scripts do not drop it while it is alive
-- (raise_score), and comes back when one does (see fair_acquire.lua and fair_refresh.lua).

-- dead reports whether a queued owner's waiter is gone: for a relock waiter (it has an alive entry), its
-- alive time is not after now; for another (a Redisson client's), Redisson's rule: its score is not after
-- now. An owner with neither is a stray entry, dead too. So is the owner of a relock Client (its ID a
-- version 8 UUID, see newClientID) without an alive entry: its Client joined it with one, in the same run,
-- and it has lived past its alive time (the set lives as long as its longest-lived entry, so a waiter that
-- outlived every other one's alive time left no entry). Judged by its Redisson score instead, which is
-- raised ahead of its alive time by the fair lock wait for each waiter before it (raise_score), a dead
-- waiter would keep a free lock from every relock waiter for minutes.
local function dead(timeouts, alive, owner, now)
  local until_ms = redis.call('zscore', alive, owner)
  if not until_ms then
    if string.sub(owner, 15, 15) == '8' and string.sub(owner, 37, 37) == ':' then
      return true
    end
    until_ms = redis.call('zscore', timeouts, owner)
  end
  return not until_ms or tonumber(until_ms) <= now
end

-- live_head drops the dead waiters (see dead) from the head of the queue, so they never block it, and
-- returns the first live owner, or nil when none is left. A live relock head without a score (removed by
-- hand) gets one, its alive time, so that Redisson's scripts can read it.
local function live_head(queue, timeouts, alive, now)
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      return nil
    end
    if not dead(timeouts, alive, head, now) then
      if not redis.call('zscore', timeouts, head) then
        redis.call('zadd', timeouts, redis.call('zscore', alive, head), head)
      end
      return head
    end
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, head)
    redis.call('zrem', alive, head)
  end
end

-- wake_live_head wakes the first live owner of the queue (see live_head), alone: it publishes message on
-- its own channel "<channel>:<owner>", with publish ('publish', or 'spublish' on a cluster).
local function wake_live_head(queue, timeouts, alive, channel, publish, message, now)
  local head = live_head(queue, timeouts, alive, now)
  if head then
    redis.call(publish, channel .. ':' .. head, message)
  end
end

-- raise_score raises the Redisson score of the relock waiter owner, at index pos of the queue, to at
-- least its alive time + wait * (pos + 1), and never lowers it. Scores only fall when a waiter ahead takes
-- the lock or gives up (by wait each time, pos times at most before the owner reaches the head), so
-- Redisson's clients do not drop a waiter that stays alive; one that dies is dropped by them about wait
-- after relock's scripts would drop it.
local function raise_score(timeouts, alive, owner, pos, wait)
  local floor = tonumber(redis.call('zscore', alive, owner)) + wait * (pos + 1)
  local score = redis.call('zscore', timeouts, owner)
  if not score or tonumber(score) < floor then
    redis.call('zadd', timeouts, floor, owner)
  end
end

-- shorten_waits subtracts wait from the scores of owners (every scored owner when owners is nil), those
-- that have one: Redisson's arithmetic for the waiters that were behind one who took the lock or gave up.
-- It is the one part of an acquisition whose cost grows with the queue, so Redis's own code does it in two
-- commands, whatever the set's size or encoding: the owners go into scratch, a plain set (ZUNIONSTORE
-- counts a set's members with score 1), and one ZUNIONSTORE adds that set, weighted by -wait, to the
-- scores. With owners given, the scratch set first keeps those that have a score (ZINTERSTORE, weight 0
-- on the scores). scratch lives only within this run; the scores keep their TTL, if they have one.
local function shorten_waits(timeouts, scratch, owners, wait)
  local every = not owners
  if every then
    owners = redis.call('zrange', timeouts, 0, -1)
  end
  if #owners == 0 or wait == 0 then
    return
  end
  local chunk = 1000 -- members per SADD: unpack's limit is far above, and the commands stay short
  for first = 1, #owners, chunk do
    redis.call('sadd', scratch, unpack(owners, first, math.min(first + chunk - 1, #owners)))
  end
  local ttl = redis.call('pttl', timeouts)
  if every or ttl ~= -2 and redis.call('zinterstore', scratch, 2, scratch, timeouts, 'WEIGHTS', 1, 0) > 0 then
    redis.call('zunionstore', timeouts, 2, timeouts, scratch, 'WEIGHTS', 1, -wait)
    if ttl > 0 then
      redis.call('pexpire', timeouts, ttl)
    end
  end
  redis.call('del', scratch)
end
