-- fixed_window mirrors fixedWindow in internal/algo/window.go.
-- State: the count, then the window floor(now / period) in d digits
-- (window_width): count 3 in window 29935680 of a minute is 3029935680.
--
-- Every algorithm returns allowed (0/1), remaining, reset after, retry
-- after and the state to store if the decision is committed; its writer
-- (here window_write) stores that state for reset after microseconds.

-- fw_state is the stored state of count (> 0) in window w, of width wd.
local function fw_state(w, count, wd)
  if w < 0 then
    return '' -- a time before 1970 (a test's clock): kept as no state
  end
  local x = count * wd + w
  if x < exact then
    return fmt('%d', x)
  end
  return fmt('%d', count) .. sub(fmt('%d', wd + w), 2)
end

-- fw_read returns the window and count of a stored value, or nil.
local function fw_read(v, wd, d)
  if not v then
    return nil
  end
  if #v <= 15 then
    local x = tonumber(v)
    if not x or x < wd or x ~= floor(x) then
      return nil
    end
    local w = x % wd
    return w, (x - w) / wd
  end
  local w, c = tonumber(sub(v, -d)), tonumber(sub(v, 1, -d - 1))
  if not c then
    return nil
  end
  return w, c
end

-- fw_decide is fixed_window's decision on the stored window sw (nil or
-- false: none) of count c, in windows of width wd.
local function fw_decide(sw, c, wd, now, limit, period, cost)
  local w = floor(now / period)
  local count = 0
  if sw then
    if sw > w then
      w = sw -- never back to an older window
    end
    if sw == w then
      count = c
    end
  end
  local reset = (w + 1) * period - now
  if count + cost > limit then
    local rem = limit - count
    if rem < 0 then
      rem = 0 -- a lowered limit
    end
    return 0, rem, reset, reset
  end
  count = count + cost
  if count == 0 then
    return 1, limit, 0, 0, ''
  end
  if server_clock and sw == w and (count + 1) * wd < exact then
    return 1, limit - count, reset, 0, cost * wd -- add to the stored count
  end
  return 1, limit - count, reset, 0, fw_state(w, count, wd)
end

local function fixed_window(key, now, limit, period, cost)
  local wd, d = window_width(period)
  local sw, c = fw_read(stored(key), wd, d)
  return fw_decide(sw, c, wd, now, limit, period, cost)
end
local fixed_window_write = window_write
