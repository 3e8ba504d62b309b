-- Renew many permits of expirable semaphores at once: the watchdog's batch. With a time to live of 0 it
-- renews nothing and only checks that the permits are still taken (permits with a lease).
--
-- KEYS[i]    the i-th permit's sorted set of taken permits, "{name}:timeout"
-- ARGV[1]    the time to live, in milliseconds, or 0 to check only
-- ARGV[i+1]  the i-th permit's id
--
-- Returns one integer per permit, in order: 1 when it is still taken (its expiry is now at least the time
-- to live away), 0 when it is gone (it expired and was given back, or was released), 3 when its key is no
-- sorted set any more (see lib/kinds.lua): the other permits go on.
local ttl = tonumber(ARGV[1])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local renewed = {}
for i = 1, #KEYS do
  local expiry = nil
  local t = redis.call('type', KEYS[i])['ok']
  if t == 'zset' then
    expiry = redis.call('zscore', KEYS[i], ARGV[i + 1])
  end
  if expiry and tonumber(expiry) > now then
    if ttl > 0 and tonumber(expiry) < now + ttl then
      redis.call('zadd', KEYS[i], 'xx', now + ttl, ARGV[i + 1])
    end
    renewed[i] = 1
  elseif t ~= 'zset' and t ~= 'none' then
    renewed[i] = 3
  else
    renewed[i] = 0
  end
end
return renewed
