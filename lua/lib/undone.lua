-- An acquisition attempt whose reply was lost is undone by its Client (undo_acquire.lua). When the undo
-- reaches Redis before the attempt does (the attempt was delayed on a slow link, or still queued on a
-- connection), it leaves a mark, "<owner field> <attempt id>" in the hash relock_undone:{<name>}; the
-- attempt, when it arrives, removes the mark and changes nothing. Acquire scripts call undone first.
-- attempt is '' for callers that do not identify their attempts (they are never undone this way).
local function undone(marks, field, attempt)
  return attempt ~= '' and redis.call('hdel', marks, field .. ' ' .. attempt) == 1
end
