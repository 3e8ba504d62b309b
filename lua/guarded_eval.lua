-- The opening of a user's script guarded by a hold (RLock.GuardedEval): the Client appends the user's
-- script to it, so that it runs only while the hold is current, in the same script run, and sees its own
-- keys and arguments as KEYS and ARGV.
--
-- KEYS[1]  the lock
-- KEYS[2]  its fencing counter, redisson_lock_token:{<name>} (the lock again when it is not fenced)
-- KEYS[3..] the user's keys
-- ARGV[1]  the owner field of the hold
-- ARGV[2]  the hold's fencing token, '0' when the lock is not fenced
-- ARGV[3..] the user's arguments
--
-- Returns the user's script's reply; or, with nothing of it run, the error "RELOCKGUARD NOTHELD ..."
-- (see lib/guard.lua).
-- @include lib/guard.lua

local refused = guard_refusal(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
if refused then
  return refused
end
local KEYS = { unpack(KEYS, 3) }
local ARGV = { unpack(ARGV, 3) }
