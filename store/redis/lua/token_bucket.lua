-- token_bucket mirrors tokenBucket in internal/algo/bucket.go.
-- Tokens are counted in microseconds of refill: the bucket holds at most
-- capacity * interval, gains one unit per microsecond, and a request takes
-- cost * interval. State: the bucket's (bucket_state in common.lua), which
-- gcra keeps too: the interval the debt is measured in and the instant the
-- debt is paid, the last update plus the µs of refill owed then (tbState's
-- B + A).

local function token_bucket(key, now, interval, capacity, cost)
  local full = capacity * interval
  local tokens = full - bucket_debt(key, now, interval) -- negative under a lowered limit
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
  return 1, floor(tokens / interval), reset, 0, bucket_state(reset, now, interval)
end
local token_bucket_write = save
