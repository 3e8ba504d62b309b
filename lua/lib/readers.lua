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
