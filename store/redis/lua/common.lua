-- common.lua: helpers shared by the algorithms. The Go side concatenates
-- this file, the files of the algorithms a script serves, a generated table
-- of those algorithms and take.lua into one script.
--
-- Every number is an integer: microseconds or requests. Numbers go to
-- redis.call as Lua numbers below 2^53, which Redis formats exactly (%.17g);
-- Lua's own tostring and .. (%.14g) would turn a 16-digit microsecond
-- timestamp into 1.7329e+15, so a string made of such a number is made by
-- str().
--
-- Stored values are decimal integers, so that Redis keeps each one in a
-- 64-bit integer (16 bytes) rather than a string: one or more counts, then
-- a field of fixed width (a window index, a time). A value below 2^53 is
-- packed and unpacked in arithmetic; a longer one (up to 19 digits is still
-- an integer to Redis) as a string, digit for digit the same. A value that
-- is not of its algorithm's layout (another version's "a:b" strings) is
-- read as no state: every character of it lands in a field that tonumber
-- or a length digit must accept, and none accepts ':'.
local floor = math.floor
local sub, byte = string.sub, string.byte

local function str(x)
  return string.format('%d', x)
end

-- exact is 2^53: integers below it are exact in Lua's numbers.
local exact = 2^53

-- window_width returns W, the smallest power of ten above every window
-- index floor(t / period) of a time t below 2^53, and its number of zeros
-- d: a window is stored as the last d digits of a value.
local function window_width(period)
  local m, w, d = floor(exact / period), 10, 1
  while w <= m do
    w, d = w * 10, d + 1
  end
  return w, d
end

-- pad returns x (0 <= x < w, w = 10^d <= 10^13) in d digits.
local function pad(x, w)
  return sub(str(w + x), 2)
end

-- digits are the characters of a length or exponent of 0 to 14 in a
-- stored value: a decimal digit up to 9, a letter beyond (then the value
-- is a string to Redis, as it would be anyway at that size).
local digits = '0123456789abcde'

-- digit_at reads such a character of v at i, or returns nil.
local function digit_at(v, i)
  local b = byte(v, i)
  if not b then
    return nil
  elseif b >= 48 and b <= 57 then
    return b - 48
  elseif b >= 97 and b <= 101 then
    return b - 87
  end
  return nil
end

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
    q = math.ceil(p / from)
  else
    q = math.ceil(p / from + 0.5)
  end
  local d = whole * to + q
  if d > max_debt then
    d = max_debt
  end
  return d
end

-- save stores value (a number below 2^53 or a string) at key for ttl
-- microseconds (rounded up to whole milliseconds), or deletes key when
-- ttl <= 0: such state is equivalent to none.
local function save(key, value, ttl)
  if ttl > 0 then
    redis.call('SET', key, value, 'PX', math.ceil(ttl / 1000))
  else
    redis.call('DEL', key)
  end
end

-- clock returns the time of a decision in µs: arg when the caller gave
-- one, the server's TIME when arg is ''.
local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  -- Writing after TIME needs effects replication: the default since Redis
  -- 5, asked for explicitly before (from 3.2).
  redis.replicate_commands()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
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
  local t
  if tat < 0 then
    return '' -- a time before 1970 (a test's clock): kept as no state
  elseif tat >= 1e15 then
    t = str(tat)
  else
    t = '0' .. sub(str(1e15 + tat), 2) -- a time before 2001: a test's clock
  end
  return str(m) .. sub(digits, e + 1, e + 1) .. t
end

-- bucket_read returns the tat and interval of a stored value, or nil.
local function bucket_read(v)
  if not v then
    return nil
  end
  local n = #v
  if n < 18 then
    return nil
  end
  local tat, e, m = tonumber(sub(v, n - 15)), digit_at(v, n - 16), tonumber(sub(v, 1, n - 17))
  if not tat or not e or not m or m < 1 then
    return nil
  end
  for _ = 1, e do
    m = m * 10
  end
  return tat, m
end

-- bucket_debt mirrors tbDebt, gcraDebt and Convert in
-- internal/algo/bucket.go: the debt at now of the bucket at key, in µs of
-- refill at interval (0: none). State measured at another interval (a
-- changed limit) is converted and stored so at once, whatever the
-- decision.
local function bucket_debt(key, now, interval)
  local tat, from = bucket_read(redis.call('GET', key))
  if not tat then
    return 0
  end
  local debt = tat - now
  if debt < 0 then
    debt = 0
  end
  debt = rescale(debt, from, interval)
  if from ~= interval then
    save(key, bucket_state(debt, now, interval), debt)
  end
  return debt
end
