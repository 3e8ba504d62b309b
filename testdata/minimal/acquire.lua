-- The minimal reentrant-hash acquisition, the floor relock's Lock is measured against (singleop_bench_test.go,
-- bench/): it takes the lock KEYS[1] for the owner field ARGV[2] for ARGV[1] ms when it is free or the
-- owner's, and replies nil; otherwise it replies the holder's PTTL.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
