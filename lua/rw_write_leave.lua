-- Take a writer that gave up out of the priority writers, and wake the readers that held back for it.
--
-- KEYS[1]  the waiting writers (see rw_read_acquire.lua)
-- KEYS[2]  the channel, redisson_rwlock:{<name>}
-- ARGV[1]  the owner's writer field
-- ARGV[2]  the message ("1": wakes every waiter)
-- ARGV[3]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub (Options.ShardedPubSub)
--
-- Returns 1 when the writer was waiting, 0 when it was not (then nobody is woken).
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
  redis.call(ARGV[3], KEYS[2], ARGV[2])
  return 1
end
return 0
