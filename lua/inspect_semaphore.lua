-- Read the whole state of a semaphore or a count-down latch in one snapshot, changing nothing: for
-- Client.InspectSemaphore and the relock command. It understands Redisson's RSemaphore and RCountDownLatch
-- layouts (a counter, a string, at the name) and its RPermitExpirableSemaphore layout (the counter, and
-- the permits taken in a sorted set, id -> expiry in Unix ms).
--
-- KEYS[1]  the counter: a semaphore's available permits, or a latch's count
-- KEYS[2]  the permits taken, "{name}:timeout" (name + ":timeout" for a name that holds a "{")
-- ARGV[1]  the most permits to return (taken and expired are counted whole)
--
-- Returns {type, value, permitsType, now, taken, expired, permits}:
--   type         the type of KEYS[1]: 'none', 'string', or another type
--   value        KEYS[1]'s value when it is a string, cut after 21 bytes (longer is no 64-bit integer),
--                '' otherwise
--   permitsType  the type of KEYS[2]: 'none', 'zset', or another type (then taken and expired are 0)
--   now          Redis's clock, in ms
--   taken        ZCARD KEYS[2]
--   expired      how many members of KEYS[2] are scored at or before now (an acquisition gives them back)
--   permits      the first ARGV[1] members of KEYS[2], soonest to expire first, with their scores, flat
-- @include lib/clock.lua

local now = now_ms()
local limit = tonumber(ARGV[1])

local kind = redis.call('type', KEYS[1])['ok']
local value = ''
if kind == 'string' then
  value = string.sub(redis.call('get', KEYS[1]), 1, 21)
end

local permitsKind = redis.call('type', KEYS[2])['ok']
local taken, expired, permits = 0, 0, {}
if permitsKind == 'zset' then
  taken = redis.call('zcard', KEYS[2])
  permits = redis.call('zrange', KEYS[2], 0, limit - 1, 'withscores')
  -- The expired permits come first. Count them among those returned; when all of those are expired and
  -- there are more, find the first live one by a binary search on rank (ZRANGE only: see the ACL in docs/operations.md).
  local shown = #permits / 2
  while expired < shown and tonumber(permits[2 * expired + 2]) <= now do
    expired = expired + 1
  end
  if expired == shown and taken > shown then
    local lo, hi = shown, taken
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local at = redis.call('zrange', KEYS[2], mid, mid, 'withscores')
      if tonumber(at[2]) <= now then
        lo = mid + 1
      else
        hi = mid
      end
    end
    expired = lo
  end
end
return {kind, value, permitsKind, now, taken, expired, permits}
