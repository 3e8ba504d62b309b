-- Count a latch down by one. At zero the latch opens: its key is deleted and "0" is announced on its
-- channel, which wakes every waiter (Redisson's awaiting clients too).
--
-- KEYS[1]  the latch
-- KEYS[2]  its channel, redisson_countdownlatch__channel__{name}
-- ARGV[1]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub
--
-- Returns the count left (0 once open; counting down an open latch changes nothing and returns 0).
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
local left = redis.call('decr', KEYS[1])
if left <= 0 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[1], KEYS[2], 0)
  return 0
end
return left
