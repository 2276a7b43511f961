-- common.lua: helpers shared by the algorithms. The Go side concatenates
-- this file, the files of the algorithms a script serves, a generated table
-- of those algorithms and take.lua into one script.
--
-- Every number is an integer: microseconds or requests. A number handed to
-- redis.call is formatted by Lua with %.14g, which turns a 16-digit
-- microsecond timestamp into 1.7329e+15, so numbers go to Redis as strings
-- made by str().
local floor = math.floor

local function str(x)
  return string.format('%d', x)
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

-- save stores value at key for ttl microseconds (rounded up to whole
-- milliseconds), or deletes key when ttl <= 0: such state is equivalent to
-- none.
local function save(key, value, ttl)
  if ttl > 0 then
    redis.call('SET', key, value, 'PX', str(math.ceil(ttl / 1000)))
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

-- bucket_debt returns a bucket's debt, read as debt µs of refill at
-- interval from (negative: none), in µs of refill at interval: Convert in
-- internal/algo/bucket.go. When from is another interval (a changed
-- limit), the converted state is stored at once, by state_of, whatever
-- the decision.
local function bucket_debt(key, debt, from, now, interval, state_of)
  if debt < 0 then
    debt = 0
  end
  debt = rescale(debt, from, interval)
  if from ~= interval then
    save(key, state_of(debt, now, interval), debt)
  end
  return debt
end
