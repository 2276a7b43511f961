-- concurrency mirrors concurrency in internal/algo/concurrency.go.
-- State: a sorted set with one member per slot held, named by the slot
-- (sluice.Request's Slot), scored by the instant (µs) its lease ends; a
-- member scored at or before now is free. A take of a cost other than 0
-- is '=' followed by the slot it holds (take.lua passes such a cost
-- through as a string), and holds it until its lease of ttl µs ends or it
-- is released (refund.lua); a take of cost 0 reads the state. Deciding
-- only reads; ended leases are removed when an admitted take is written
-- to a set that holds any (the state concurrency returns says so: 'p').
-- Under a lowered limit more slots may be held than the limit: a take
-- waits for the oldest leases to end until one fits.

local function concurrency(key, now, limit, ttl, cost)
  -- ZCARD first: a key with no slot held, the usual one, needs neither
  -- the count of the live leases nor, once taken, their pruning.
  local held, n, reset, after = redis.call('ZCARD', key), 0, 0
  if held > 0 then
    after = '(' .. fmt('%d', now)
    n = redis.call('ZCOUNT', key, after, '+inf')
  end
  if n > 0 then
    reset = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2]) - now
  end
  local rem = limit - n
  if rem < 0 then
    rem = 0
  end
  if cost == 0 then
    return 1, rem, reset, 0, ''
  end
  if n + 1 > limit then
    -- The k-th lease to end (k = n + 1 - limit) must end before a slot
    -- is free.
    local kth = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', fmt('%d', n - limit), '1')
    return 0, rem, reset, tonumber(kth[2]) - now
  end
  if ttl > reset then
    reset = ttl
  end
  if n < held then
    return 1, limit - n - 1, reset, 0, 'p' -- ended leases to prune
  end
  return 1, limit - n - 1, reset, 0, ''
end

-- concurrency_write prunes the ended leases, if the decision found any
-- (state 'p'), and holds the take's slot (cost: '=' and its name) until
-- now + ttl: a slot already held moves there.
local function concurrency_write(key, state, reset, now, cost, ttl)
  if cost == 0 then
    return
  end
  if state == 'p' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now))
  end
  redis.call('ZADD', key, fmt('%d', now + ttl), sub(cost, 2))
  redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000)))
end
