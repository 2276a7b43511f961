-- token_bucket mirrors tokenBucket in internal/algo/bucket.go.
-- Tokens are counted in microseconds of refill: the bucket holds at most
-- capacity * interval, gains one unit per microsecond, and a request takes
-- cost * interval. State: the string "tokens:last update".
local function token_bucket(key, now, interval, capacity, cost)
  local full = capacity * interval
  local tokens = full
  local v = redis.call('GET', key)
  if v then
    local x, y = string.match(v, '^(%d+):(%d+)$')
    if x then
      tokens = tonumber(x) + (now - tonumber(y))
      if tokens > full then
        tokens = full
      end
    end
  end
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
  return 1, floor(tokens / interval), reset, 0, str(tokens) .. ':' .. str(now)
end
local token_bucket_write = save
