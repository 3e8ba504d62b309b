-- Run Redis commands only while a hold is current (RLock.GuardedWrite): the check and the commands are one
-- script run, so no other holder's write can come between them.
--
-- KEYS[1]  the lock
-- KEYS[2]  its fencing counter, redisson_lock_token:{<name>} (the lock again when it is not fenced)
-- ARGV[1]  the owner field of the hold
-- ARGV[2]  the hold's fencing token, '0' when the lock is not fenced
-- ARGV[3]  the number of commands; then, for each, its number of words and its words (see run_commands)
--
-- Returns the commands' replies, in order; or, with nothing run, the error "RELOCKGUARD NOTHELD ..." when
-- the hold is not current (see lib/guard.lua).
-- @include lib/guard.lua

local refused = guard_refusal(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
if refused then
  return refused
end
return run_commands(ARGV, 3)
