-- fixed_window mirrors fixedWindow in internal/algo/window.go.
-- State: the string "window:count", window = floor(now / period).
--
-- Every algorithm returns allowed (0/1), remaining, reset after, retry
-- after and the state to store if the decision is committed; its writer
-- (here save) stores that state for reset after microseconds.
-- fw_state is the stored state of count in window w.
local function fw_state(w, count)
  return str(w) .. ':' .. str(count)
end

local function fixed_window(key, now, limit, period, cost)
  local w = floor(now / period)
  local count = 0
  local v = redis.call('GET', key)
  if v then
    local sw, c = string.match(v, '^(%d+):(%d+)$')
    if sw then
      sw = tonumber(sw)
      if sw > w then
        w = sw -- never back to an older window
      end
      if sw == w then
        count = tonumber(c)
      end
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
  return 1, limit - count, reset, 0, fw_state(w, count)
end
local fixed_window_write = save
