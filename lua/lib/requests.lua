-- A Revoke's markers (RLock.Revoke). A Revoke's request leaves, for each holder it asks, a marker in the
-- lock's undone-attempt marks, relock_undone:{<name>} (lib/undone.lua): the field
-- "?request <owner field>", holding "<deadline> <heard> <request>": until when it holds (ms, Redis's
-- clock), whether the holder's Client heard the request for a hold that listens ('1') or not yet ('0'),
-- and the request, "<requesting Client's ID> <request id>". No owner field starts with '?': no attempt's
-- mark is ever named so.
--
-- A marker lives no longer than the hold it was left for, so that a live one says the hold asked is still
-- the one there, even when the same owner holds the lock again (its field is the same):
--   - the lock's final release deletes the marks with the lock (lib/release.lua; rlock_force_release.lua),
--     at no cost: the release, the handoff and the force release delete that key already; a takeover
--     deletes the old holders' markers;
--   - a marker's deadline is never after the lock's expiry when it was set, and relock never brings a
--     hold's expiry forward (renewals and reentries only extend it), so a hold that expires takes its
--     marker with it. (The deadline is checked, rather than the key's TTL, since the marks outlive it.)
-- A lock deleted or expired behind relock's back (a DEL, a PEXPIRE, Redisson's forceUnlock) is not seen
-- here: the holder's Client withdraws its acknowledgement when it learns of the loss (see
-- release_request_heard.lua).

-- marker_field is the marks' field of the marker left for the holder field.
local function marker_field(field)
  return '?request ' .. field
end

-- live_marker returns the deadline and heard flag of field's marker when it is request's and its deadline
-- is after now, else nil.
local function live_marker(marks, field, request, now)
  local v = redis.call('hget', marks, marker_field(field))
  if not v then
    return nil
  end
  local deadline, heard, req = string.match(v, '^(%d+) ([01]) (.*)$')
  deadline = tonumber(deadline)
  if req ~= request or not deadline or deadline <= now then
    return nil
  end
  return deadline, heard
end

-- set_marker writes field's marker, and keeps the marks at least until its deadline.
local function set_marker(marks, field, deadline, heard, request, now)
  redis.call('hset', marks, marker_field(field), string.format('%d %s %s', deadline, heard, request))
  local ttl = deadline - now
  if redis.call('pttl', marks) < ttl then
    redis.call('pexpire', marks, ttl)
  end
end

-- marker_deadline returns until when a marker set now for the lock may live: at most life ms, and, when
-- the lock expires, 1 ms before its expiry (its PTTL counts from the script's start, now from a little
-- later), or nil when that leaves no time.
local function marker_deadline(lock, now, life)
  local pttl = redis.call('pttl', lock)
  if pttl >= 0 then
    life = math.min(life, pttl - 1)
  end
  if life <= 0 then
    return nil
  end
  return now + life
end
