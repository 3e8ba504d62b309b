-- Delete a read-write lock whoever holds it (readers and writer, with the readers' timeout keys), and
-- wake every waiter.
--
-- KEYS[1]  the lock hash (see rw_read_acquire.lua)
-- KEYS[2]  the channel, redisson_rwlock:{<name>}
-- KEYS[3]  the release record
-- KEYS[4]  the undone attempts' marks (see lib/undone.lua)
-- ARGV[1]  the message ("1": wakes every waiter)
-- ARGV[2]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
-- ARGV[3]  the lock's tag, which starts its read-hold keys (see rw_read_acquire.lua)
--
-- Returns 1 when a lock was deleted, 0 when there was none. A key that is no read-write lock's is not
-- deleted: an error RELOCK_... says what it is (see lib/kinds.lua).
-- @include lib/kinds.lua

local refused = held_refusal(KEYS[1], true)
if refused then
  return refused
end
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
  if field ~= 'mode' then
    local n = tonumber(redis.call('hget', KEYS[1], field)) or 0
    for i = 1, n do
      redis.call('del', ARGV[3] .. ':' .. field .. ':rwlock_timeout:' .. i)
    end
  end
end
redis.call('del', KEYS[1], KEYS[3], KEYS[4])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
