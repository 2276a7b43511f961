-- peek.lua: replies what take.lua would reply for the same KEYS and ARGV
-- (the same layout: see take.lua), and writes nothing: no decision is
-- committed, and bucket_debt converts a bucket kept under another limit
-- without storing it (read_only). It runs only reading commands (GET,
-- TIME, and for sliding_log ZCOUNT, ZRANGE, ZRANGEBYSCORE), all of which
-- take.lua runs too.
--
-- algorithms, generated before this file, maps each algorithm code to its
-- decision function and its writer; only the decision functions run.

read_only = true
local now = clock(ARGV[1])

local out, allowed = {}, true
for i = 1, #KEYS do
  local j = 4 * i - 2
  local alg = algorithms[ARGV[j]]
  if not alg then
    return redis.error_reply('sluice: unknown algorithm ' .. tostring(ARGV[j]))
  end
  local ok, rem, reset, retry = alg[1](KEYS[i], now, tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]))
  out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = ok, rem, reset, retry
  allowed = allowed and ok == 1
end

if not allowed then
  -- As take.lua answers a denial: limits that would have admitted the
  -- request report their state as it is.
  for i = 1, #KEYS do
    if out[4 * i - 3] == 1 then
      local j = 4 * i - 2
      local _, rem, reset = algorithms[ARGV[j]][1](KEYS[i], now, tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), 0)
      out[4 * i - 2], out[4 * i - 1] = rem, reset
    end
  end
end
out[#out + 1] = now
return out
