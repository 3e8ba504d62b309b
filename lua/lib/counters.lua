-- The refusals of the counters' scripts (Semaphore, CountDownLatch, PermitSemaphore: an integer string at
-- the name), with lib/kinds.lua, which must be included before this file.

-- counter_refusal returns the refusal of a counter's script for its counter key, or nil when the key is
-- absent or holds an integer. permits, when not nil, is the name's "{<name>}:timeout": the script is a
-- Semaphore's or a CountDownLatch's, which refuses a PermitSemaphore with permits taken (a permit
-- semaphore's own scripts, and the counter scripts the two semaphores share, pass nil).
local function counter_refusal(counter, permits)
  local t = key_type(counter)
  if t == 'hash' then
    if redis.call('hexists', counter, 'mode') == 1 then
      return refusal('NOTASEMAPHORE', 'rwlock', t)
    end
    return refusal('NOTASEMAPHORE', 'rlock', t)
  elseif t == 'string' then
    if string_kind(counter) ~= 'semaphore' then
      return refusal('NOTASEMAPHORE', 'other', t)
    end
  elseif t ~= 'none' then
    return refusal('NOTASEMAPHORE', 'other', t)
  end
  if permits and redis.call('exists', permits) == 1 then
    return refusal('WRONGKIND', 'permitsemaphore', t)
  end
  return nil
end

-- permits_refusal returns the refusal of a PermitSemaphore's script whose permits key, "{<name>}:timeout",
-- is not a sorted set (nor absent), or nil.
local function permits_refusal(permits, counter)
  local t = key_type(permits)
  if t ~= 'zset' and t ~= 'none' then
    return refusal('NOTASEMAPHORE', 'other', key_type(counter))
  end
  return nil
end
