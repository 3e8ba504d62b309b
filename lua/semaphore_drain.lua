-- Take every available permit of a semaphore.
--
-- KEYS[1]  the semaphore
--
-- Returns the number of permits taken (0 for a semaphore never set, which stays unset).
local available = tonumber(redis.call('get', KEYS[1]))
if available == nil then
  return 0
end
redis.call('set', KEYS[1], 0)
return available
