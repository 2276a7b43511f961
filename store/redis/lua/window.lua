-- window.lua: what fixed_window and sliding_window share (see common.lua).

-- window_width returns W, the smallest power of ten above every window
-- index floor(t / period) of a time t below 2^53, and its number of zeros
-- d: a window is stored as the last d digits of a value.
local function window_width(period)
  local m = exact / period -- windows are below it, and it is never a power of ten
  if m <= 1e7 then
    if m <= 1e4 then
      if m <= 1e2 then
        return 1e2, 2 -- MaxPeriod: m is 28.6
      elseif m <= 1e3 then
        return 1e3, 3
      end
      return 1e4, 4
    elseif m <= 1e5 then
      return 1e5, 5
    elseif m <= 1e6 then
      return 1e6, 6
    end
    return 1e7, 7
  elseif m <= 1e10 then
    if m <= 1e8 then
      return 1e8, 8
    elseif m <= 1e9 then
      return 1e9, 9
    end
    return 1e10, 10
  elseif m <= 1e11 then
    return 1e11, 11
  elseif m <= 1e12 then
    return 1e12, 12
  end
  return 1e13, 13 -- MinPeriod: m is 9.0e12
end

-- window_write is the writer of both window algorithms. Their state is
-- the value to store (a string), or, for a count added within the window
-- the key already holds, a number: what to add to the stored integer
-- (INCRBY, which keeps the key's TTL). That TTL was set when the window
-- was written with the same reset instant, by the server's clock (the
-- algorithms take this way only when server_clock is set, since a
-- request's own time runs apart from the server's clock that TTLs count
-- on), so it is the one a SET would set now, to the millisecond it rounds
-- to. It saves the SET's formatting and expiry work. A number is relative
-- to the value the decision read, so that no other write to the key may
-- come between a decision and its writer: take.lua decides distinct keys
-- (the Limiter refuses two limits of one identity on one key), and a
-- script deciding several requests must write each before it decides the
-- next on the same key.
--
-- A request with its own time (not server_clock) writes the window with
-- a TTL that lasts at least until the instant its state ends (now +
-- reset, a window boundary) by the server's clock too: a later request
-- at the server's clock in the same window adds to the count in place,
-- keeping that TTL, and a TTL counted on a clock ahead of the server's
-- would let the key expire before the window ends, forgetting its count.
-- A TTL longer than needed costs memory only: the value names its window.
local function window_write(key, state, reset, now)
  if type(state) ~= 'number' then
    if not server_clock and reset > 0 then
      redis.replicate_commands()
      local t = redis.call('TIME')
      local left = now + reset - (tonumber(t[1]) * 1000000 + tonumber(t[2]))
      if left > reset then
        reset = left
      end
    end
    save(key, state, reset)
  elseif state > 0 then
    redis.call('INCRBY', key, fmt('%d', state))
  end
end
