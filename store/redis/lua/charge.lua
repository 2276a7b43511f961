-- charge.lua: consumes cost from every limit in KEYS whatever it holds,
-- never denying: what a reservation cost beyond what it reserved
-- (sluice.Settler's Charge), a debt. A window's count and a log may exceed
-- the limit, a bucket's debt its capacity (up to max_debt); the next
-- requests are denied until it is repaid. Then it returns four integers
-- per key as take.lua does, for a request of cost 0: the state after the
-- charge (denied while in debt), decided on the value the charge returns
-- it left at the key (false: none; nil: not a string, a log) without
-- reading it again (common.lua's stored). It mirrors Spec.Charge in
-- internal/algo/settle.go.
--
-- ARGV[1]   now in µs, or '' to use the server's clock (TIME)
-- then the limits of KEYS in runs (store/redis's "Settle arguments"):
--   algorithm code, its two parameters as take.lua has them, and n, the
--   number of keys in a row under that limit (the next n of KEYS); then
--   the cost of each of them

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
    return false
  end
  local s = fw_state(w, count, wd)
  window_write(key, s, (w + 1) * period - now, now)
  return s
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
  if reset <= 0 then
    save(key, '', 0)
    return false
  end
  local s = sw_state(w, prev, cur, wd)
  window_write(key, s, reset, now)
  return s
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
  local s = bucket_state(debt, now, interval)
  save(key, s, debt)
  return debt > 0 and s
end

-- charges maps each algorithm code (algo.Code, as the generated table
-- algorithms) to its charge.
local charges = {
  f = fixed_window_charge,
  w = sliding_window_charge,
  l = sliding_log_charge,
  t = bucket_charge,
  g = bucket_charge,
  c = function() end, -- a slot is held by a take alone: a charge leaves it
}

local now = clock(ARGV[1])
local out, k, a = {}, 0, 2
local last = #ARGV
while a <= last do
  local code = ARGV[a]
  local charge, alg = charges[code], algorithms[code]
  if not charge or not alg then
    return redis.error_reply('sluice: unknown algorithm ' .. tostring(code))
  end
  local p1, p2 = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 4
  for _ = 1, tonumber(ARGV[a - 1]) do
    k = k + 1
    local key = KEYS[k]
    kept_key, kept_value = key, charge(key, now, p1, p2, tonumber(ARGV[a]))
    if kept_value == nil then
      kept_key = nil
    end
    local ok, rem, reset, retry = alg[1](key, now, p1, p2, 0)
    out[4 * k - 3], out[4 * k - 2], out[4 * k - 1], out[4 * k] = ok, rem, reset, retry
    a = a + 1
  end
end
return out
