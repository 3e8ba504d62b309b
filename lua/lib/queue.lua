-- live_head drops, from the head of a fair queue (a list of owners), the entries whose deadline (their
-- score in the deadlines sorted set, ms on Redis's clock) is not after now: their processes stopped
-- refreshing them. It returns the first live owner, or nil when none is left.
local function live_head(queue, deadlines, now)
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      return nil
    end
    local alive = tonumber(redis.call('zscore', deadlines, head))
    if alive and alive > now then
      return head
    end
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, head)
  end
end

-- wake_live_head wakes the first live owner of a fair queue (see live_head), alone: it publishes message
-- on its own channel "<channel>:<owner>", with publish ('publish', or 'spublish' on a cluster).
local function wake_live_head(queue, deadlines, channel, publish, message, now)
  local head = live_head(queue, deadlines, now)
  if head then
    redis.call(publish, channel .. ':' .. head, message)
  end
end
