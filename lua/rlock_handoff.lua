-- Release one hold of a reentrant lock, as rlock_release.lua does; at the last one, hand the lock to
-- another waiting owner of the releasing Client instead of announcing the release, so that the lock goes
-- from one owner to the next in this one script run (see gate.go in the library); or, when the Client has
-- handed it over enough times in a row, announce the release letting the other Clients' waiters go first.
--
-- KEYS[1..7]  as rlock_release.lua's: the lock, the release channel, the release record, the undone
--             attempts' marks, relock's waiting owners, the prefix of the Clients' wake channels, the void
--             marks of repeated requests
-- KEYS[8]     when the next owner's lock is fenced: the fencing token counter, redisson_lock_token:{<name>}
-- ARGV[1..6]  as rlock_release.lua's
-- ARGV[7]     the next owner's field, or '' to hand it to nobody: the release is announced, naming a
--             waiter of the releasing Client only if no other Client's waits (see announce_release)
-- ARGV[8]     the id of the handoff, as the next owner's acquisition attempt: its Client undoes it as it
--             undoes an attempt whose reply was lost (see lib/undone.lua), and a handoff that arrives
--             after its undo hands nothing: the release is then announced as rlock_release.lua's is
-- ARGV[9]     how long the next owner's hold lives, in milliseconds (its lease, or the watchdog timeout),
--             then '@' when it has a budget (see hold_ttl in lib/clock.lua)
-- ARGV[10]    the releasing Client's ID
-- ARGV[11]    as rlock_release.lua's ARGV[7]: how long a repeat's void mark lives (a handoff is always a
--             first sending: repeats are sent as rlock_release.lua, but a void handoff changes nothing)
--
-- Returns {left, 0, 0}     as rlock_release.lua: -1 when the owner does not hold the lock (nothing changed),
--                          its remaining hold count when it still holds it, 0 when the lock was deleted and
--                          its release announced;
--         {0, 0, woke}     when the release was announced letting the other Clients go first (ARGV[7]
--                          ''): woke is 1 when it named a waiter of another Client, 2 when it named nobody
--                          and somebody heard Redisson's unlock message, 3 when both, else 0 (see
--                          announce_release in lib/waiters.lua);
--         {0, 1, token, clock} when the lock went to the next owner: one hold, living ARGV[9] ms, with token
--                          as a first acquisition's fencing token (0 when the lock is not fenced) and
--                          clock, as an acquisition's (see lib/hold.lua); the next owner left relock's waiting
--                          owners, and nobody was woken;
--         an error RELOCK_... when the key is no reentrant lock's (see lib/kinds.lua): nothing changed.
-- @include lib/clock.lua
-- @include lib/waiters.lua
-- @include lib/release.lua
-- @include lib/hold.lua
-- @include lib/undone.lua
-- @include lib/kinds.lua

local refused = held_refusal(KEYS[1], false)
if refused then
  return refused
end
-- The handoff's arrival uses its mark up, whatever the release does: it never comes again.
local hands = ARGV[7] ~= '' and not undone(KEYS[4], ARGV[7], ARGV[8])
local left = release_hold(KEYS[1], KEYS[3], KEYS[4], KEYS[7], ARGV[1], ARGV[3], ARGV[4], ARGV[11])
if left ~= 0 then
  return {left, 0, 0}
end
if not hands then
  local yield = ''
  if ARGV[7] == '' then
    yield = ARGV[10]
  end
  return {0, 0, announce_release(KEYS[5], KEYS[6], KEYS[2], ARGV[5], ARGV[2], ARGV[6], yield)}
end
redis.call('zrem', KEYS[5], ARGV[7])
local ttl, _, budgeted = hold_ttl(ARGV[9]) -- '<ms>', or '<ms>@' for a hold with a budget
local granted = first_hold(KEYS[1], ARGV[7], ttl, nil, KEYS[8], budgeted)
return {0, 1, granted[3], granted[4]}
