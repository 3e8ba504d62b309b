-- Run Redis commands on a resource fenced by a lock's tokens (RLock.FencedWrite): the resource's fence
-- keeps the highest fencing token that wrote to it, and a write with a lower token is refused, whatever the
-- lock says now. The check, the fence's advance and the commands are one script run.
--
-- KEYS[1]  the fence: a string holding the highest token that wrote (no expiry, as the lock's counter)
-- ARGV[1]  the writer's fencing token
-- ARGV[2]  the number of commands; then, for each, its number of words and its words (see run_commands)
--
-- Returns the commands' replies, in order; or, with nothing run, the error "RELOCKGUARD STALE ..." when
-- a higher token has written already.
-- @include lib/guard.lua

local token = tonumber(ARGV[1])
local seen = tonumber(redis.call('get', KEYS[1]) or '0')
if seen == nil or token < seen then
  return redis.error_reply('RELOCKGUARD STALE a later holder has written (fence ' .. tostring(redis.call('get', KEYS[1])) .. ')')
end
if token > seen then
  redis.call('set', KEYS[1], ARGV[1])
end
return run_commands(ARGV, 2)
