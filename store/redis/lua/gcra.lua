-- gcra mirrors gcra in internal/algo/bucket.go.
-- State: the bucket's (bucket_state in common.lua): the interval its debt
-- is measured in and the theoretical arrival time (the instant at which
-- the bucket is full again).

local function gcra(key, now, interval, capacity, cost)
  local full = capacity * interval
  local tat = now + bucket_debt(key, now, interval)
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
  return 1, floor((full - reset) / interval), reset, 0, bucket_state(reset, now, interval)
end
local gcra_write = save
