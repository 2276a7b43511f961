-- common.lua: helpers shared by the algorithms. The Go side concatenates
-- this file, window.lua if the script serves fixed_window or
-- sliding_window, bucket.lua if it serves token_bucket or gcra, the files
-- of the algorithms it serves, a generated table of those algorithms and
-- take.lua (or refund.lua) into one script. Each function defined costs
-- every run of the script a closure, so that a script defines only what
-- its algorithms use, and the helpers are few.
--
-- Every number is an integer: microseconds or requests. Numbers go to
-- redis.call as strings made by fmt('%d', x): Lua's own tostring and ..
-- (%.14g) turn a 16-digit microsecond timestamp into 1.7329e+15, and a
-- Lua number handed to redis.call is formatted by Redis as a double
-- (%.17g), exact below 2^53 but dearer than integer formatting.
--
-- Stored values are decimal integers, so that Redis keeps each one as a
-- 64-bit integer in its object (16 bytes in all) rather than as a string
-- (32 bytes or more): one or more counts, then
-- a field of fixed width (a window index, a time). A value below 2^53 is
-- packed and unpacked in arithmetic; a longer one (up to 19 digits is still
-- an integer to Redis) as a string, digit for digit the same. A value that
-- is not of its algorithm's layout (another version's "a:b" strings) is
-- read as no state: every character of it lands in a field that tonumber
-- or a length digit must accept, and none accepts ':'.
local floor, ceil = math.floor, math.ceil
local sub, byte, fmt = string.sub, string.byte, string.format

-- exact is 2^53: integers below it are exact in Lua's numbers.
local exact = 2^53

-- digits are the characters of a small number in a stored value (a
-- length, an exponent: 0 to 14): a decimal digit up to 9, a letter beyond
-- (then the value is a string to Redis, as it would be anyway at that
-- size). A reader takes byte - 48 for '0'..'9' and byte - 87 for 'a'..'e',
-- and nothing else.
local digits = '0123456789abcde'

-- save stores value (a string) at key for ttl
-- microseconds (rounded up to whole milliseconds), or deletes key when
-- ttl <= 0: such state is equivalent to none.
local function save(key, value, ttl)
  if ttl > 0 then
    redis.call('SET', key, value, 'PX', fmt('%d', ceil(ttl / 1000)))
  else
    redis.call('DEL', key)
  end
end

-- stored returns the value at key as GET does (false: none), or, once,
-- kept_value when kept_key is key: refund.lua and charge.lua set them to
-- the value they have just left at a key, so that the decision reporting
-- the state after reads it without a second GET. Every algorithm that
-- keeps a string reads it through here.
local kept_key, kept_value
local function stored(key)
  if key == kept_key then
    kept_key = nil
    return kept_value
  end
  return redis.call('GET', key)
end

-- before_args, before_keys and before_out are the arguments, keys and
-- reply integers that refund_first.lua used before batch.lua's, in a batch
-- of decisions that carries refunds: none in any other script.
local before_args, before_keys, before_out = 0, 0, {}

-- read_only is set by peek.lua: a decision function then writes nothing
-- (bucket_debt converts state without storing it), nor does take.lua
-- commit the decision, so that the script reads the state as take.lua
-- would decide on it and leaves it as it is.
local read_only = false

-- server_clock is set once clock has read the server's TIME: the state of
-- a window then expires, by the server's clock, at the instant the
-- decision computes, so that a write within the same window may keep the
-- key's TTL (window.lua's window_write).
local server_clock = false

-- clock returns the time of a decision in µs: arg when the caller gave
-- one, the server's TIME when arg is ''.
local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  -- Writing after TIME needs effects replication: the default since Redis
  -- 5, asked for explicitly before (from 3.2).
  redis.replicate_commands()
  server_clock = true
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
