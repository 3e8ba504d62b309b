-- prune_stale_heads drops, from the head of a fair lock's queue, the waiters whose score (the time by which
-- they should have reached the head) is not after now, as Redisson's fair lock scripts all do first. It
-- alters no other score.
local function prune_stale_heads(queue, timeouts, now)
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      return
    end
    if tonumber(redis.call('zscore', timeouts, head)) > now then
      return
    end
    redis.call('zrem', timeouts, head)
    redis.call('lpop', queue)
  end
end
