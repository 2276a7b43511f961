-- gcra mirrors gcra in internal/algo/bucket.go.
-- State: one integer, the theoretical arrival time: the instant at which
-- the bucket is full again.
local function gcra(key, now, interval, capacity, cost)
  local full = capacity * interval
  local tat = now
  local v = tonumber(redis.call('GET', key)) -- GET answers false when missing
  if v and v > now then
    tat = v
  end
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
  return 1, floor((full - reset) / interval), reset, 0, str(new_tat)
end
local gcra_write = save
