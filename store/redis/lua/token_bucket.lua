-- token_bucket mirrors tokenBucket in internal/algo/bucket.go.
-- Tokens are counted in microseconds of refill: the bucket holds at most
-- capacity * interval, gains one unit per microsecond, and a request takes
-- cost * interval. State: the string "debt:last update:interval", the µs
-- of refill owed at the last update, measured at that interval.

-- tb_state is the stored state of a debt at now, measured at interval.
local function tb_state(debt, now, interval)
  return str(debt) .. ':' .. str(now) .. ':' .. str(interval)
end

-- tb_debt mirrors tbDebt and Convert: the debt at now in µs of refill at
-- interval. State measured at another interval (a changed limit) is
-- converted and stored so at once, whatever the decision.
local function tb_debt(key, now, interval)
  local v = redis.call('GET', key)
  if not v then
    return 0
  end
  local d, last, from = string.match(v, '^(%d+):(%d+):(%d+)$')
  if not d or tonumber(from) == 0 then
    return 0 -- not a state this version wrote: none
  end
  return bucket_debt(key, tonumber(d) - (now - tonumber(last)), tonumber(from), now, interval, tb_state)
end

local function token_bucket(key, now, interval, capacity, cost)
  local full = capacity * interval
  local tokens = full - tb_debt(key, now, interval) -- negative under a lowered limit
  local need = cost * interval
  if tokens < need then
    local avail = tokens
    if avail < 0 then
      avail = 0
    end
    return 0, floor(avail / interval), full - tokens, need - tokens
  end
  tokens = tokens - need
  local reset = full - tokens
  if reset <= 0 then
    return 1, capacity, 0, 0, ''
  end
  return 1, floor(tokens / interval), reset, 0, tb_state(reset, now, interval)
end
local token_bucket_write = save
