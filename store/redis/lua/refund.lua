-- refund.lua: gives back what an earlier take.lua run consumed from KEYS:
-- a reservation settled below its cost (sluice.Settler's Refund), or a
-- decision split over Cluster slots denied by a later slot (see "Stacked
-- decisions on a Cluster" in redis.go), so that each key's state is as if
-- the take had consumed cost less. Then it returns four integers per key
-- as take.lua does, for a request of cost 0: the state after the refund,
-- decided on the value the refund returns it left at the key (false:
-- none; nil: not known, read again) rather than reading it twice
-- (common.lua's stored), or those the refund returns after the value,
-- when it decided them itself.
-- It mirrors Spec.Refund in internal/algo/settle.go.
--
-- refund_main.lua runs it over ARGV and KEYS, refund_first.lua over
-- their first part, before batch.lua's. Its ARGV:
--
-- ARGV[1]   now in µs, or '' to use the server's clock (TIME)
-- then the limits of KEYS in runs (store/redis's "Settle arguments"):
--   algorithm code, its two parameters as take.lua has them, and n, the
--   number of keys in a row under that limit (the next n of KEYS); then,
--   for each of them, the cost to give back, and the reset after (µs) and
--   now (µs, take.lua's last reply integer) of the take, or '' and '' for
--   a take not known: the refund then gives back to the latest
--   consumption (the window of now, the newest entries of a log, a bucket
--   up to full)
--
-- A refund never gives back more than the take consumed: where it cannot
-- tell (the state was reset, or its window already replaced), it gives
-- back nothing, which errs towards denying. What it assumes of each
-- algorithm's stored value (adapt these functions when a format changes):
--
--   fixed_window    count and window (fw_read); the take counted cost in
--                   window floor(taken / period).
--   sliding_window  counts and window (sw_read); the take counted cost in
--                   window floor(taken / period), which is the stored
--                   window or the one before it, or no longer counts.
--   sliding_log     a sorted set whose members at one score are numbered
--                   (sl_member: stamp, stamp:1, stamp:2, ...); the take
--                   added cost of them at score taken.
--   token_bucket    interval and tat (read by bucket_debt, which converts
--   and gcra        a debt measured at another interval).
--   concurrency     a sorted set of slots scored by their leases' ends
--                   (concurrency.lua); the cost is '=' and the slot the
--                   take held, which the refund releases if its lease has
--                   not ended, or a number for a slot not known: the live
--                   lease that ends first is released.
--
-- token_bucket and gcra are one bucket of full = capacity * interval µs
-- (gcra's level at t is full - max(0, tat - t)). Let A be the level with
-- the take and B the level without it. Right after the take B - A is the
-- cost (times interval); a take admitted in A is admitted in B and
-- subtracts the same from both, and refill adds the same to both until B
-- reaches full, where B - A shrinks. So the exact refund at now is
-- min(cost, full - (the highest A since the take)). A rises by at most the
-- time elapsed, and was full - reset right after the take, so
--   give = min(cost, reset - (now - taken))
-- never exceeds the exact refund, and equals it when now = taken (a
-- request with its own time), when no other take came in between, or when
-- the bucket, refilled for all of now - taken, stays at least the cost
-- short of full (the usual case: the refund comes milliseconds later).

-- Window algorithms give back to the window a take at taken counted in,
-- or, for a take not known, the window a take at now counts in: the stored
-- one, unless it is older.

-- fw_gives reports whether the window w of count c holds the take's cost
-- (see fixed_window_refund).
local function fw_gives(w, c, now, taken, period, cost)
  if c < cost then
    return false
  end
  if taken then
    return w == floor(taken / period)
  end
  return w >= floor(now / period)
end

-- fixed_window_refund takes the units off the count in one INCRBY, which
-- keeps the key's TTL (set by the write of this window's value to last
-- the window at least, window_write): a value below 2^53 is count * W +
-- window in arithmetic (fw_state's string form spells the same number).
-- When the count it took them from was not the take's window holding
-- them, a second INCRBY puts them back (or a DEL removes the key the first
-- created): within the script nothing sees the difference. A value that
-- INCRBY refuses, or too long for exact arithmetic, is read and written
-- as a string.
local function fixed_window_refund(key, now, taken, limit, period, cost)
  local wd, d = window_width(period)
  local give = cost * wd
  if give < exact then
    local x = redis.pcall('INCRBY', key, fmt('%d', -give))
    if type(x) == 'number' then
      local old = x + give
      if old < exact then
        local w = old % wd
        local c = (old - w) / wd
        if old < wd or not fw_gives(w, c, now, taken, period, cost) then
          if old == 0 then
            redis.call('DEL', key) -- none was there: none is
            return false
          end
          redis.call('INCRBY', key, fmt('%d', give))
          return fmt('%d', old) -- the window ended: what it counted no longer matters
        end
        if c == cost or (w + 1) * period <= now then
          redis.call('DEL', key)
          return false, fw_decide(false, 0, wd, now, limit, period, 0)
        end
        return true, fw_decide(w, c - cost, wd, now, limit, period, 0) -- decided: no value to keep
      end
      redis.call('INCRBY', key, fmt('%d', give))
    end
  end
  local v = redis.call('GET', key)
  local sw, c = fw_read(v, wd, d)
  if not sw or not fw_gives(sw, c, now, taken, period, cost) then
    return v
  end
  c = c - cost
  local reset = (sw + 1) * period - now
  if c <= 0 or reset <= 0 then
    redis.call('DEL', key)
    return false
  end
  local s = fw_state(sw, c, wd)
  window_write(key, s, reset, now)
  return s
end

local function sliding_window_refund(key, now, taken, _, period, cost)
  local wd, d = window_width(period)
  local v = redis.call('GET', key)
  local sw, a, b = sw_read(v, wd, d)
  if not sw then
    return v
  end
  if not taken then
    if sw < floor(now / period) or b < cost then
      return v
    end
    b = b - cost
  else
    local w = floor(taken / period)
    if sw == w and b >= cost then
      b = b - cost
    elseif sw == w + 1 and a >= cost then
      a = a - cost
    else
      return v
    end
  end
  local reset = sw_reset(a, b, sw, now, period)
  if reset <= 0 then
    redis.call('DEL', key)
    return false
  end
  local s = sw_state(sw, a, b, wd)
  window_write(key, s, reset, now)
  return s
end

-- sl_remove removes the cost highest-numbered members at stamp, of the n
-- there are: the numbering that sliding_log_write relies on stays.
local function sl_remove(key, stamp, n, cost)
  for first = n - cost, n - 1, 1000 do
    local names = {}
    for i = first, math.min(first + 999, n - 1) do
      names[#names + 1] = sl_member(stamp, i)
    end
    redis.call('ZREM', key, unpack(names))
  end
end

local function sliding_log_refund(key, now, taken, _, period, cost)
  if taken then
    local stamp = fmt('%d', taken)
    local n = redis.call('ZCOUNT', key, stamp, stamp)
    if n < cost then
      return
    end
    sl_remove(key, stamp, n, cost)
  else
    -- A take not known: the newest cost live members, instant by instant.
    if redis.call('ZCOUNT', key, '(' .. fmt('%d', now - period), '+inf') < cost then
      return
    end
    while cost > 0 do
      local stamp = fmt('%d', tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2]))
      local n = redis.call('ZCOUNT', key, stamp, stamp)
      local k = math.min(n, cost)
      sl_remove(key, stamp, n, k)
      cost = cost - k
    end
  end
  local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2]
  if top and tonumber(top) + period > now then
    redis.call('PEXPIRE', key, fmt('%d', ceil((tonumber(top) + period - now) / 1000)))
  else
    redis.call('DEL', key)
  end
end

-- bucket_give is what token_bucket and gcra give back (see above): cost
-- for a take not known, capped at a full bucket by bucket_refund.
local function bucket_give(now, taken, interval, cost, reset)
  if not taken then
    return cost * interval
  end
  return math.min(cost * interval, reset - (now - taken))
end

-- bucket_refund gives back to a bucket (token_bucket's or gcra's).
local function bucket_refund(key, now, taken, interval, _, cost, reset)
  local give = bucket_give(now, taken, interval, cost, reset)
  if give <= 0 then
    return
  end
  local debt = bucket_debt(key, now, interval)
  if debt <= 0 then
    return -- no state is a full bucket
  end
  debt = math.max(debt - give, 0)
  local s = bucket_state(debt, now, interval)
  save(key, s, debt)
  return debt > 0 and s
end

-- concurrency_refund releases a slot (see above): it frees nothing when
-- the slot is not held, or its lease has ended. The slot of a known take
-- is removed without reading its lease first: a lease that has ended
-- counts for nothing, so removing it frees nothing either (a take would
-- have pruned it). A release returns the state after it as concurrency
-- does for a take of cost 0, read on the way (the last lease to end is
-- read to set the key's TTL anyway), so that refund_runs does not read
-- it again; ZREM of the last member leaves no key, which needs no DEL.
local function concurrency_refund(key, now, _, limit, _, cost)
  if type(cost) == 'string' then
    if redis.call('ZREM', key, sub(cost, 2)) == 0 then
      return -- not held
    end
  else
    local slot = redis.call('ZRANGEBYSCORE', key, '(' .. fmt('%d', now), '+inf', 'LIMIT', '0', '1')[1]
    if not slot then
      return
    end
    redis.call('ZREM', key, slot)
  end
  local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2]
  if top and tonumber(top) > now then
    local reset = tonumber(top) - now
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000)))
    local rem = limit - redis.call('ZCOUNT', key, '(' .. fmt('%d', now), '+inf')
    if rem < 0 then
      rem = 0
    end
    return nil, 1, rem, reset, 0
  end
  if top then
    redis.call('DEL', key) -- only ended leases are left
  end
  return nil, 1, limit, 0, 0
end

-- refunds maps each algorithm code (algo.Code, as the generated table
-- algorithms) to its refund.
local refunds = {
  f = fixed_window_refund,
  w = sliding_window_refund,
  l = sliding_log_refund,
  t = bucket_refund,
  g = bucket_refund,
  c = concurrency_refund,
}

-- refund_runs gives back, at now, to the keys after the first k of KEYS,
-- the runs of ARGV[from .. to] (see ARGV above), and puts their four
-- integers each in out after the first 4k; it returns k and the keys it
-- gave back to, or an error reply.
local function refund_runs(now, from, to, k, out)
  local a = from
  while a <= to do
    local code = ARGV[a]
    local refund, alg = refunds[code], algorithms[code]
    if not refund or not alg then
      return nil, redis.error_reply('sluice: unknown algorithm ' .. tostring(code))
    end
    local p1, p2 = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    a = a + 4
    for _ = 1, tonumber(ARGV[a - 1]) do
      k = k + 1
      local key, cost = KEYS[k], ARGV[a]
      cost = tonumber(cost) or cost -- a slot: concurrency_refund
      local ok, rem, reset, retry
      if cost ~= 0 then
        local left
        left, ok, rem, reset, retry = refund(key, now, tonumber(ARGV[a + 2]), p1, p2, cost, tonumber(ARGV[a + 1]))
        if left ~= nil and not ok then
          kept_key, kept_value = key, left
        end
      end
      if not ok then
        ok, rem, reset, retry = alg[1](key, now, p1, p2, 0)
      end
      out[4 * k - 3], out[4 * k - 2], out[4 * k - 1], out[4 * k] = ok, rem, reset, retry
      a = a + 3
    end
  end
  return k
end
