-- Decide the undo of an acquisition attempt whose reply was lost (see lib/undone.lua), for every lock kind.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the undone attempts' marks, relock_undone:{<name>}
-- ARGV[1]  the owner's field
-- ARGV[2]  the hold count the attempt gave the owner if it ran (the count the Client knew, plus one)
-- ARGV[3]  the attempt's id
-- ARGV[4]  how long the mark lives, in milliseconds (a late attempt arrives within a network delay; the
--          lock's final release deletes every mark)
--
-- Returns 1 when the owner has that count: the attempt ran, and the caller releases the level it took (a
--           release expecting that count);
--         0 when it does not: the attempt has not run, and the mark left here makes sure it never will.
--           (A key that is no hash holds no count: the attempt, refused, changed nothing.)
local count = nil
if redis.call('type', KEYS[1])['ok'] == 'hash' then
  count = redis.call('hget', KEYS[1], ARGV[1])
end
if count == ARGV[2] then
  return 1
end
redis.call('hset', KEYS[2], ARGV[1] .. ' ' .. ARGV[3], '1')
local ttl = tonumber(ARGV[4])
if redis.call('pttl', KEYS[2]) < ttl then
  redis.call('pexpire', KEYS[2], ttl)
end
return 0
