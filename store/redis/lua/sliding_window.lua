-- sliding_window mirrors slidingWindow in internal/algo/window.go.
-- State: the current count, the previous window's count, the number of
-- digits of the previous count (one digit; a letter beyond 9), and the
-- window in d digits (window_width): current 7 and previous 12 in window
-- 29935680 of a minute is 7122029935680. A count of 0 has no digits.

-- sw_state is the stored state of window w (of width wd) and its counts.
local function sw_state(w, prev, cur, wd)
  if w < 0 then
    return '' -- a time before 1970 (a test's clock): kept as no state
  end
  local k, p = 0, 1
  while p <= prev do
    k, p = k + 1, p * 10
  end
  local x = ((cur * p + prev) * 10 + k) * wd + w
  if x < exact then
    return fmt('%d', x)
  end
  local s = ''
  if prev > 0 then
    s = fmt('%d', prev)
  end
  if cur > 0 then
    s = fmt('%d', cur) .. s
  end
  return s .. sub(digits, k + 1, k + 1) .. sub(fmt('%d', wd + w), 2)
end

-- sw_read returns the window and counts of a stored value, or nil.
local function sw_read(v, wd, d)
  if not v then
    return nil
  end
  local n = #v
  if n <= 15 then
    local x = tonumber(v)
    if not x or x < wd or x ~= floor(x) then
      return nil
    end
    local w = x % wd
    x = (x - w) / wd
    local k = x % 10
    x = (x - k) / 10
    local p = 1
    for _ = 1, k do
      p = p * 10
    end
    local prev = x % p
    return w, prev, (x - prev) / p
  end
  local w, k = tonumber(sub(v, n - d + 1)), byte(v, n - d)
  if k >= 97 then
    k = k - 87
  elseif k <= 57 then
    k = k - 48
  else
    return nil
  end
  if not w or k < 0 or k > 13 or n - d - k - 1 < 0 then
    return nil
  end
  local prev, cur = 0, 0
  if k > 0 then
    prev = tonumber(sub(v, n - d - k, n - d - 1))
  end
  if n - d - k - 1 > 0 then
    cur = tonumber(sub(v, 1, n - d - k - 1))
  end
  if not prev or not cur then
    return nil
  end
  return w, prev, cur
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
  local wd, d = window_width(period)
  local sw, a, b = sw_read(stored(key), wd, d)
  if not sw then
    sw, a, b = false, 0, 0
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
    if server_clock and sw == w and b > 0 then
      -- Add to the stored current count (window_write), whose TTL is
      -- this reset's: the digits below it are 10^(k+1) * wd, k those of
      -- the previous count.
      local q = 10
      while q <= prev * 10 do
        q = q * 10
      end
      if (cur + 1) * q * wd < exact then
        return 1, rem, reset, 0, cost * q * wd
      end
    end
    return 1, rem, reset, 0, sw_state(w, prev, cur, wd)
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
local sliding_window_write = window_write
