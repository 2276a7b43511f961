-- gcra mirrors gcra in internal/algo/bucket.go.
-- State: the string "tat:interval", the theoretical arrival time (the
-- instant at which the bucket is full again) and the interval its debt
-- (tat - now) is measured in.

-- gcra_state is the stored state of a debt at now, measured at interval:
-- its theoretical arrival time and the interval.
local function gcra_state(debt, now, interval)
  return str(now + debt) .. ':' .. str(interval)
end

-- gcra_debt mirrors gcraDebt and Convert: the debt at now in µs of refill
-- at interval. State measured at another interval (a changed limit) is
-- converted and stored so at once, whatever the decision.
local function gcra_debt(key, now, interval)
  local v = redis.call('GET', key)
  if not v then
    return 0
  end
  local tat, from = string.match(v, '^(%d+):(%d+)$')
  if not tat or tonumber(from) == 0 then
    return 0 -- not a state this version wrote (it wrote a bare tat): none
  end
  return bucket_debt(key, tonumber(tat) - now, tonumber(from), now, interval, gcra_state)
end

local function gcra(key, now, interval, capacity, cost)
  local full = capacity * interval
  local tat = now + gcra_debt(key, now, interval)
  local new_tat = tat + cost * interval
  local allow_at = new_tat - full
  if now < allow_at then
    local avail = full - (tat - now)
    if avail < 0 then
      avail = 0
    end
    return 0, floor(avail / interval), tat - now, allow_at - now
  end
  local reset = new_tat - now
  if reset <= 0 then
    return 1, capacity, 0, 0, ''
  end
  return 1, floor((full - reset) / interval), reset, 0, gcra_state(reset, now, interval)
end
local gcra_write = save
