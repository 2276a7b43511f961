-- bucket.lua: what token_bucket and gcra share (see common.lua): both
-- keep the same state.

-- rescale mirrors rescale in internal/algo/bucket.go: debt, µs of refill
-- at interval from, as µs of refill at interval to (the same tokens owed),
-- rounded up, at most max_debt.
local max_debt = 2^51
local function rescale(debt, from, to)
  if debt > max_debt then
    debt = max_debt
  end
  if from == to or debt <= 0 then
    return debt
  end
  local whole = floor(debt / from)
  local part = debt - whole * from
  if whole * to >= max_debt then
    return max_debt
  end
  local p = part * to
  local q
  if p < 2^53 then
    q = ceil(p / from)
  else
    q = ceil(p / from + 0.5)
  end
  local d = whole * to + q
  if d > max_debt then
    d = max_debt
  end
  return d
end

-- A bucket (token_bucket and gcra, which keep the same state) is stored
-- as the interval its debt is measured in, then its theoretical arrival
-- time tat (the instant it is full again: token_bucket's last update plus
-- its debt then) in 16 digits. The interval is its significant digits m
-- and its number of trailing zeros e, one digit (a letter beyond 9): 100
-- per minute, a token every 600000µs, at tat 1796140812190356 is
-- 651796140812190356, an integer to Redis while m has two digits.

-- bucket_state is the stored state of a debt at now, measured at interval.
local function bucket_state(debt, now, interval)
  local m, e = interval, 0
  while m % 10 == 0 do
    m, e = m / 10, e + 1
  end
  local tat = now + debt
  if tat >= 1e15 and e <= 9 then
    return fmt('%d%d%d', m, e, tat)
  elseif tat < 0 then
    return '' -- a time before 1970 (a test's clock): kept as no state
  elseif tat < 1e15 then
    tat = '0' .. sub(fmt('%d', 1e15 + tat), 2) -- before 2001: a test's clock
  else
    tat = fmt('%d', tat)
  end
  return fmt('%d', m) .. sub(digits, e + 1, e + 1) .. tat
end

-- bucket_debt mirrors tbDebt, gcraDebt and Convert in
-- internal/algo/bucket.go: the debt at now of the bucket at key, in µs of
-- refill at interval (0: none). State measured at another interval (a
-- changed limit) is converted and stored so at once, whatever the
-- decision (unless read_only: a peek).
local function bucket_debt(key, now, interval)
  local v = stored(key)
  if not v then
    return 0
  end
  local n = #v
  if n < 18 then
    return 0
  end
  local tat, e, from = tonumber(sub(v, n - 15)), byte(v, n - 16), tonumber(sub(v, 1, n - 17))
  if e >= 97 then
    e = e - 87
  elseif e <= 57 then
    e = e - 48
  else
    return 0
  end
  if not tat or not from or from < 1 or e < 0 or e > 14 then
    return 0 -- not a state this version wrote: none
  end
  for _ = 1, e do
    from = from * 10
  end
  local debt = tat - now
  if debt < 0 then
    debt = 0
  end
  if from == interval then
    if debt > max_debt then
      return max_debt -- as rescale would, without the call
    end
    return debt
  end
  debt = rescale(debt, from, interval)
  if not read_only then
    save(key, bucket_state(debt, now, interval), debt)
  end
  return debt
end
