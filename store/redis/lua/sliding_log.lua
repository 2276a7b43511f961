-- sliding_log mirrors slidingLog in internal/algo/log.go.
-- State: a sorted set with one member per unit of admitted cost, scored by
-- its time; members at or before now - period have expired. Deciding only
-- reads; expired members are removed when an admitted request is written.
-- The members at one instant are numbered (sl_member): the first is the
-- instant alone, which Redis keeps as an integer, and the others
-- instant:1, instant:2, ...

-- sl_member names the i-th member at the instant stamp (a string).
local function sl_member(stamp, i)
  if i == 0 then
    return stamp
  end
  return stamp .. ':' .. fmt('%d', i)
end

local function sliding_log(key, now, limit, period, cost)
  local after = '(' .. fmt('%d', now - period)
  local n = redis.call('ZCOUNT', key, after, '+inf')
  if n + cost > limit then
    -- The k-th oldest live member must expire before cost fits.
    local k = n + cost - limit
    local kth = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', fmt('%d', k - 1), '1')
    local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    local rem = limit - n
    if rem < 0 then
      rem = 0 -- a lowered limit, or a clock that stepped back
    end
    return 0, rem, tonumber(top[2]) + period - now, tonumber(kth[2]) + period - now
  end
  if n + cost == 0 then
    return 1, limit, 0, 0, ''
  end
  -- The state is how many members the set holds at now, when that is
  -- known to be none: no live member, or none as late as now.
  local newest, at = now, 0
  if n > 0 then
    local top = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
    if top >= now then
      at = '' -- the writer counts them
    end
    if cost == 0 or top > newest then
      newest = top
    end
  end
  return 1, limit - n - cost, newest + period - now, 0, at
end

-- sliding_log_write prunes expired members and adds cost members at now,
-- numbered after the at members already there ('': counts them).
local function sliding_log_write(key, at, reset, now, cost, period)
  if reset <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now - period))
  local stamp = fmt('%d', now)
  -- Members with one score are always removed together, so the next
  -- number is their count, whatever clocks do.
  if at == '' then
    at = redis.call('ZCOUNT', key, stamp, stamp)
  end
  for first = 0, cost - 1, 1000 do
    local args = {}
    for i = first, math.min(first + 999, cost - 1) do
      args[#args + 1] = stamp
      args[#args + 1] = sl_member(stamp, at + i)
    end
    redis.call('ZADD', key, unpack(args))
  end
  redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000)))
end
