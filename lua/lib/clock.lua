-- now_ms returns Redis's clock (TIME) in milliseconds.
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A hold's time to live, as an acquisition or a renewal is given it: '<ms>', or '<ms>@<end>' for a hold
-- with a budget (WithMaxHold) whose first acquisition's reply told its Client this clock: <end> is when
-- the budget ends on it (ms, as now_ms), and the hold never lives past <end>, however late the command
-- arrives.

-- hold_ttl returns the time to live arg gives a hold from now, in ms: <ms>, or what is left until <end>
-- when that is less (0 or less: the budget is spent); and, in that case, <end>, at which the hold must
-- then expire (see expire_hold); else nil.
local function hold_ttl(arg)
  local ms, stop = string.match(arg, '^(%d+)@(%d+)$')
  if not ms then
    return tonumber(arg), nil
  end
  ms, stop = tonumber(ms), tonumber(stop)
  local left = stop - now_ms()
  if left < ms then
    return left, stop
  end
  return ms, nil
end

-- expire_hold makes key expire ttl ms from now, or at the time at (ms, this clock) when hold_ttl gave one:
-- exactly there, whenever the command runs.
local function expire_hold(key, ttl, at)
  if at then
    redis.call('pexpireat', key, at)
  else
    redis.call('pexpire', key, ttl)
  end
end
