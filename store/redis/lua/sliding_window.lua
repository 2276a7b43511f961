-- sliding_window mirrors slidingWindow in internal/algo/window.go.
-- State: the string "window:previous:current", the counts of the stored
-- window and of the one before it.

-- sw_state is the stored state of window w and its counts.
local function sw_state(w, prev, cur)
  return str(w) .. ':' .. str(prev) .. ':' .. str(cur)
end

-- sw_counts returns the previous and current counts at window w.
local function sw_counts(sw, a, b, w)
  if sw == w then
    return a, b
  elseif sw == w - 1 then
    return b, 0
  end
  return 0, 0
end

-- sw_allows: prev*(period-e)/period + cur + cost <= limit, multiplied out.
local function sw_allows(prev, cur, e, limit, period, cost)
  return prev * (period - e) + (cur + cost) * period <= limit * period
end

local function sw_remaining(prev, cur, e, limit, period)
  local r = floor((limit - cur) - prev * (period - e) / period)
  if r < 0 then
    return 0
  end
  return r
end

local function sw_reset(prev, cur, w, now, period)
  if cur > 0 then
    return (w + 2) * period - now
  elseif prev > 0 then
    return (w + 1) * period - now
  end
  return 0
end

-- sw_at returns the window at t (never older than the stored window sw)
-- and the time elapsed in it (0 when sw is ahead of t).
local function sw_at(sw, t, period)
  local w = floor(t / period)
  if sw and sw > w then
    w = sw
  end
  local e = t - w * period
  if e < 0 then
    e = 0
  end
  return w, e
end

local function sliding_window(key, now, limit, period, cost)
  local sw, a, b = false, 0, 0
  local v = redis.call('GET', key)
  if v then
    local x, y, z = string.match(v, '^(%d+):(%d+):(%d+)$')
    if x then
      sw, a, b = tonumber(x), tonumber(y), tonumber(z)
    end
  end
  local w, e = sw_at(sw, now, period)
  local prev, cur = sw_counts(sw, a, b, w)
  if sw_allows(prev, cur, e, limit, period, cost) then
    cur = cur + cost
    local reset = sw_reset(prev, cur, w, now, period)
    local rem = sw_remaining(prev, cur, e, limit, period)
    if reset <= 0 then
      return 1, rem, 0, 0, ''
    end
    return 1, rem, reset, 0, sw_state(w, prev, cur)
  end
  -- The earliest admitting instant lies in (now, (w+2)*period]: bisect.
  local lo, hi = 1, (w + 2) * period - now
  while lo < hi do
    local mid = lo + floor((hi - lo) / 2)
    local wt, et = sw_at(sw, now + mid, period)
    local p, c = sw_counts(sw, a, b, wt)
    if sw_allows(p, c, et, limit, period, cost) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return 0, sw_remaining(prev, cur, e, limit, period), sw_reset(prev, cur, w, now, period), lo
end
local sliding_window_write = save
