-- sliding_log mirrors slidingLog in internal/algo/log.go.
-- State: a sorted set with one member per unit of admitted cost, scored by
-- its time; members at or before now - period have expired. Deciding only
-- reads; expired members are removed when an admitted request is written.
local function sliding_log(key, now, limit, period, cost)
  local after = '(' .. str(now - period)
  local n = redis.call('ZCOUNT', key, after, '+inf')
  if n + cost > limit then
    -- The k-th oldest live member must expire before cost fits.
    local k = n + cost - limit
    local kth = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', str(k - 1), '1')
    local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    return 0, limit - n, tonumber(top[2]) + period - now, tonumber(kth[2]) + period - now
  end
  if n + cost == 0 then
    return 1, limit, 0, 0, n
  end
  local newest = now
  if n > 0 then
    local top = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
    if cost == 0 or top > newest then
      newest = top
    end
  end
  return 1, limit - n - cost, newest + period - now, 0, n
end

-- sliding_log_write prunes expired members and adds cost members at now;
-- n is the live count the decision saw.
local function sliding_log_write(key, n, reset, now, cost, period)
  if reset <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', str(now - period))
  local stamp = str(now)
  -- Members are unique: at one instant the live count only grows.
  for first = 0, cost - 1, 1000 do
    local args = {}
    for i = first, math.min(first + 999, cost - 1) do
      args[#args + 1] = stamp
      args[#args + 1] = stamp .. ':' .. str(n + i)
    end
    redis.call('ZADD', key, unpack(args))
  end
  redis.call('PEXPIRE', key, str(math.ceil(reset / 1000)))
end
