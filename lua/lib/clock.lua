-- now_ms returns Redis's clock (TIME) in milliseconds.
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A hold's time to live, as an acquisition or a renewal is given it: '<ms>', or, for a hold with a budget
-- (WithMaxHold), '<ms>@' until its first grant's reply has told its Client this clock, then '<ms>@<end>':
-- <end> is when the budget ends on it (ms, as now_ms), and the hold never lives past <end>, however late
-- the command arrives.

-- hold_ttl returns the time to live arg gives a hold from now, in ms: <ms>, or what is left until <end>
-- when that is less (0 or less: the budget is spent); and, in that case, <end>, at which the hold must
-- then expire (see expire_hold), else nil; and whether the hold has a budget, for which a grant's reply
-- tells this clock (see grant_clock).
local function hold_ttl(arg)
  local ms, stop = string.match(arg, '^(%d+)@(%d*)$')
  if not ms then
    return tonumber(arg), nil, false
  end
  ms = tonumber(ms)
  if stop == '' then
    return ms, nil, true
  end
  stop = tonumber(stop)
  local left = stop - now_ms()
  if left < ms then
    return left, stop, true
  end
  return ms, nil, true
end

-- grant_clock is what a grant's reply tells of this clock: now_ms() for a hold with a budget (budgeted, as
-- hold_ttl returns it), whose budget its Client counts from the first grant on this clock; else 0.
local function grant_clock(budgeted)
  if budgeted then
    return now_ms()
  end
  return 0
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
