-- take.lua: decides one request against every limit in KEYS, all or
-- nothing, and returns four integers per limit: allowed (0/1), remaining,
-- reset after (µs), retry after (µs); then the now it decided at (µs),
-- which a refund of this take (refund.lua) needs.
--
-- ARGV[1]   now in µs, or '' to use the server's clock (TIME)
-- ARGV[4i-2], ARGV[4i-1], ARGV[4i], ARGV[4i+1]   for KEYS[i]: algorithm
--           code, its two parameters (limit, period) or (interval,
--           capacity), and the cost (the keys of a request limited under
--           several client keys may have different costs); a concurrency
--           limit's cost is 0 or '=' and the slot it holds, which goes to
--           its functions as a string
--
-- algorithms, generated before this file, maps each algorithm code to its
-- decision function and its writer.

local now = clock(ARGV[1])

local out, states, costs, allowed = {}, {}, {}, true
for i = 1, #KEYS do
  local j = 4 * i - 2
  local alg = algorithms[ARGV[j]]
  if not alg then
    return redis.error_reply('sluice: unknown algorithm ' .. tostring(ARGV[j]))
  end
  local cost = ARGV[j + 3]
  cost = tonumber(cost) or cost
  local ok, rem, reset, retry, state = alg[1](KEYS[i], now, tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), cost)
  out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = ok, rem, reset, retry
  states[i], costs[i] = state, cost
  allowed = allowed and ok == 1
end

if allowed and not read_only then -- read_only: peek.lua
  for i = 1, #KEYS do
    local j = 4 * i - 2
    algorithms[ARGV[j]][2](KEYS[i], states[i], out[4 * i - 1], now, costs[i], tonumber(ARGV[j + 2]))
  end
elseif not allowed then
  -- Nothing is consumed: limits that would have admitted the request
  -- report their state as it is.
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
