-- Writes guarded by a hold (see guard.go in the library): they run only while the hold they name is
-- current, and what refuses them is an error reply "RELOCKGUARD <code> <reason>", which the Client turns
-- into a sentinel error (NOTHELD: ErrNotHeld; STALE: ErrStaleToken).

-- guard_refusal returns the refusal of a write guarded by the hold of field on lock, or nil when the hold is
-- current: the owner field is in the lock's hash and, when token is not '0' (a fenced lock), the lock's
-- fencing counter is still at token, so no other first acquisition (the same owner's included, after its
-- hold was lost) came since the one that got it.
local function guard_refusal(lock, field, counter, token)
  if redis.call('type', lock)['ok'] ~= 'hash' or redis.call('hexists', lock, field) == 0 then
    return redis.error_reply('RELOCKGUARD NOTHELD the hold is gone')
  end
  if token ~= '0' and redis.call('get', counter) ~= token then
    return redis.error_reply('RELOCKGUARD NOTHELD the lock was acquired again since this hold began')
  end
  return nil
end

-- run_commands runs the commands packed in args from position at on: a count of commands, then for each
-- one its number of words and its words. It returns their replies, in order. A command that fails ends
-- the script with its error (the ones before it have run: Redis does not roll back).
local function run_commands(args, at)
  local replies = {}
  local n = tonumber(args[at])
  at = at + 1
  for i = 1, n do
    local words = tonumber(args[at])
    replies[i] = redis.call(unpack(args, at + 1, at + words))
    at = at + words + 1
  end
  return replies
end
