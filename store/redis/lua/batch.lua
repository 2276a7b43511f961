-- batch.lua: decides several requests in one call, one after another in
-- the order given, each all or nothing exactly as take.lua decides one
-- (a request sees what the requests before it in the batch consumed),
-- and returns, for each request, four integers per limit: allowed (0/1),
-- remaining, reset after (µs), retry after (µs); then the now it decided
-- at (µs). The client coalesces concurrent decisions into it
-- (coalesce.go).
--
-- Two forms of ARGV (after those of refund_first.lua, in a batch that
-- carries refunds too). The compact one, for requests of one limit each,
-- none of them a concurrency limit (whose cost is a slot):
-- ARGV[1]   -L, the number of distinct limits of the batch, negated
-- then, for each of them: algorithm code, its two parameters
-- then, for each request in turn: r = cost * L + i, its cost and the index
--   (0-based) of its limit, at the server's clock (one TIME for the whole
--   batch, read when the first such request is decided); or -r - 1
--   followed by its own now in µs. Each request's key is the next of KEYS.
--
-- The general one:
-- ARGV[1]   the number of requests
-- then, for each request in turn:
--   now in µs, or '' for the server's clock (one TIME for the whole
--   batch, read when the first such request is decided)
--   m, its number of limits, whose keys are the next m of KEYS
--   for each of its limits: algorithm code, its two parameters, the cost
--   (a concurrency limit's: 0 or '=' and its slot, as take.lua's)
--
-- algorithms, generated before this file, maps each algorithm code to its
-- decision function and its writer.

-- A batch that also carries refunds (refund_first.lua, run before this
-- file) finds them done: its own ARGV start after before_args of them,
-- its keys after before_keys, its integers in before_out after theirs.
local server_now
local A, k = before_args, before_keys
local out, n, a = before_out, 4 * k, A + 2

local nl = -tonumber(ARGV[A + 1])
if nl > 0 then
  -- The compact form: each limit's numbers are read once.
  local algs, p1s, p2s = {}, {}, {}
  for i = 1, nl do
    local j = A + 3 * i - 1
    algs[i] = algorithms[ARGV[j]]
    if not algs[i] then
      return redis.error_reply('sluice: unknown algorithm ' .. tostring(ARGV[j]))
    end
    p1s[i], p2s[i] = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  end
  a = A + 3 * nl + 2
  local last = #ARGV
  while a <= last do
    local r, now = tonumber(ARGV[a])
    if r < 0 then
      r, now = -r - 1, tonumber(ARGV[a + 1])
      server_clock = false
      a = a + 2
    else
      if not server_now then
        server_now = clock('')
      end
      now = server_now
      server_clock = true
      a = a + 1
    end
    local i = r % nl
    local cost = (r - i) / nl
    i = i + 1
    k = k + 1
    local alg, key, p2 = algs[i], KEYS[k], p2s[i]
    local ok, rem, reset, retry, state = alg[1](key, now, p1s[i], p2, cost)
    if ok == 1 then
      alg[2](key, state, reset, now, cost, p2)
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = ok, rem, reset, retry, now
    n = n + 5
  end
  return out
end

local states, costs = {}, {} -- reused by every request of several limits
for _ = 1, tonumber(ARGV[A + 1]) do
  local now = ARGV[a]
  local m = tonumber(ARGV[a + 1])
  a = a + 2
  if now == '' then
    if not server_now then
      server_now = clock('')
    end
    now = server_now
  else
    now = tonumber(now)
  end
  -- The window algorithms add to a stored count in place only at the
  -- server's clock (common.lua): say so per request, since a batch may
  -- mix requests of both clocks.
  server_clock = ARGV[a - 2] == ''
  if m == 1 then
    -- One limit, most requests: its decision is the request's.
    local alg = algorithms[ARGV[a]]
    if not alg then
      return redis.error_reply('sluice: unknown algorithm ' .. tostring(ARGV[a]))
    end
    local key, p2, cost = KEYS[k + 1], tonumber(ARGV[a + 2]), ARGV[a + 3]
    cost = tonumber(cost) or cost
    local ok, rem, reset, retry, state = alg[1](key, now, tonumber(ARGV[a + 1]), p2, cost)
    if ok == 1 then
      alg[2](key, state, reset, now, cost, p2)
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = ok, rem, reset, retry, now
  else
    local allowed = true
    for i = 1, m do
      local j = a + 4 * (i - 1)
      local alg = algorithms[ARGV[j]]
      if not alg then
        return redis.error_reply('sluice: unknown algorithm ' .. tostring(ARGV[j]))
      end
      local cost = ARGV[j + 3]
      cost = tonumber(cost) or cost
      local ok, rem, reset, retry, state = alg[1](KEYS[k + i], now, tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), cost)
      out[n + 4 * i - 3], out[n + 4 * i - 2], out[n + 4 * i - 1], out[n + 4 * i] = ok, rem, reset, retry
      states[i], costs[i] = state, cost
      allowed = allowed and ok == 1
    end
    if allowed then
      for i = 1, m do
        local j = a + 4 * (i - 1)
        algorithms[ARGV[j]][2](KEYS[k + i], states[i], out[n + 4 * i - 1], now, costs[i], tonumber(ARGV[j + 2]))
      end
    else
      -- Nothing is consumed: limits that would have admitted the request
      -- report their state as it is.
      for i = 1, m do
        if out[n + 4 * i - 3] == 1 then
          local j = a + 4 * (i - 1)
          local _, rem, reset = algorithms[ARGV[j]][1](KEYS[k + i], now, tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), 0)
          out[n + 4 * i - 2], out[n + 4 * i - 1] = rem, reset
        end
      end
    end
    out[n + 4 * m + 1] = now
  end
  n, k, a = n + 4 * m + 1, k + m, a + 4 * m
end
return out
