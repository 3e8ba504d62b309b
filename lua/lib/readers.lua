-- read_hold_alive reports whether a reader of a read-write lock still holds it: whether a level of its
-- read hold (field holds n levels, each with its own key <base>:<field>:rwlock_timeout:<level>, which
-- expires on its own) has a key left. A reader whose every level expired (its Client stopped renewing, or
-- its lease ran out) holds nothing, even though its field is still in the lock's hash.
local function read_hold_alive(base, field, n)
  for level = n, 1, -1 do
    if redis.call('exists', base .. ':' .. field .. ':rwlock_timeout:' .. level) == 1 then
      return true
    end
  end
  return false
end

-- read_hold_ttl returns how long a reader's hold (field, holding n levels) may still last unless renewed,
-- in milliseconds: the longest time to live of the level keys it has left, -1 when one has no expiry, and
-- 0 when none is left (it holds nothing). A writer waits that long at most for it, not for the lock's
-- hash, which an earlier reader may have given a longer life.
local function read_hold_ttl(base, field, n)
  local longest = 0
  for level = n, 1, -1 do
    local left = redis.call('pttl', base .. ':' .. field .. ':rwlock_timeout:' .. level)
    if left == -1 then
      return -1
    elseif left > longest then
      longest = left
    end
  end
  return longest
end
