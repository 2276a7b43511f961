-- charge.lua: consumes cost from every limit in KEYS whatever it holds,
-- never denying: what a reservation cost beyond what it reserved
-- (sluice.Settler's Charge), a debt. A window's count and a log may exceed
-- the limit, a bucket's debt its capacity (up to max_debt); the next
-- requests are denied until it is repaid. Then it returns four integers
-- per key as take.lua does, for a request of cost 0: the state after the
-- charge (denied while in debt). It mirrors Spec.Charge in
-- internal/algo/settle.go.
--
-- ARGV[1]   now in µs, or '' to use the server's clock (TIME)
-- ARGV[4i-2], ARGV[4i-1], ARGV[4i], ARGV[4i+1]   for KEYS[i]: algorithm
--           code, its two parameters as take.lua takes them, and the cost

local function fixed_window_charge(key, now, _, period, cost)
  local wd, d = window_width(period)
  local w = floor(now / period)
  local count = cost
  local sw, c = fw_read(redis.call('GET', key), wd, d)
  if sw then
    if sw > w then
      w = sw -- never back to an older window
    end
    if sw == w then
      count = count + c
    end
  end
  if count == 0 then
    save(key, '', 0)
    return
  end
  window_write(key, fw_state(w, count, wd), (w + 1) * period - now, now)
end

local function sliding_window_charge(key, now, _, period, cost)
  local wd, d = window_width(period)
  local sw, a, b = sw_read(redis.call('GET', key), wd, d)
  if not sw then
    sw, a, b = false, 0, 0
  end
  local w = sw_at(sw, now, period)
  local prev, cur = sw_counts(sw, a, b, w)
  cur = cur + cost
  local reset = sw_reset(prev, cur, w, now, period)
  if reset > 0 then
    window_write(key, sw_state(w, prev, cur, wd), reset, now)
  else
    save(key, '', 0)
  end
end

local function sliding_log_charge(key, now, _, period, cost)
  local n = redis.call('ZCOUNT', key, '(' .. fmt('%d', now - period), '+inf')
  if n + cost == 0 then
    redis.call('DEL', key)
    return
  end
  local newest = now
  if n > 0 then
    local top = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
    if cost == 0 or top > newest then
      newest = top
    end
  end
  sliding_log_write(key, '', newest + period - now, now, cost, period)
end

-- bucket_charge charges a bucket (token_bucket's or gcra's).
local function bucket_charge(key, now, interval, _, cost)
  local debt = bucket_debt(key, now, interval) + cost * interval
  if debt > max_debt then
    debt = max_debt
  end
  save(key, bucket_state(debt, now, interval), debt)
end

-- charges maps each algorithm code (algo.Code, as the generated table
-- algorithms) to its charge.
local charges = {
  f = fixed_window_charge,
  w = sliding_window_charge,
  l = sliding_log_charge,
  t = bucket_charge,
  g = bucket_charge,
}

local now = clock(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local j = 4 * i - 2
  local charge, alg = charges[ARGV[j]], algorithms[ARGV[j]]
  if not charge or not alg then
    return redis.error_reply('sluice: unknown algorithm ' .. tostring(ARGV[j]))
  end
  local p1, p2 = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  charge(KEYS[i], now, p1, p2, tonumber(ARGV[j + 3]))
  local ok, rem, reset, retry = alg[1](KEYS[i], now, p1, p2, 0)
  out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = ok, rem, reset, retry
end
return out
