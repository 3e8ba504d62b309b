-- The minimal reentrant-hash release (see acquire.lua): it takes one level of the owner field ARGV[1] off
-- the lock KEYS[1]; at the last it deletes the lock, publishes ARGV[2] on KEYS[2] and replies 1; a level
-- left keeps the lock ARGV[3] ms more and replies 0; an owner that holds nothing gets nil.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[2])
return 1
