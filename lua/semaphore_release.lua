-- Give permits back to a semaphore, or add some (a negative count takes some away), and announce the
-- number now available on its channel, as Redisson's RSemaphore does: its waiters wake up to that many.
--
-- KEYS[1]  the semaphore
-- KEYS[2]  its channel, redisson_sc:{name}
-- ARGV[1]  the permits to add
-- ARGV[2]  how to announce: 'publish', or 'spublish' on a cluster using sharded pub/sub
--
-- Returns the number of permits now available, or an error RELOCK_... when the name's key is no counter
-- (see lib/kinds.lua): nothing changed then. (It serves a PermitSemaphore's additions too.)
-- @include lib/kinds.lua
-- @include lib/counters.lua

local refused = counter_refusal(KEYS[1], nil)
if refused then
  return refused
end
local available = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], available)
return available
