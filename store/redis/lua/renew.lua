-- renew.lua: extends the lease of a slot under each concurrency limit in
-- KEYS to end ttl µs (the limit's second parameter) after now, if the
-- slot is still held: a slot released, or whose lease has ended, is not
-- taken again (sluice.Renewer). Then it returns four integers per key as
-- take.lua does for a request of cost 0, the first of them 1 where the
-- slot was held and is renewed, 0 elsewhere. It mirrors Spec.Renew in
-- internal/algo/concurrency.go.
--
-- ARGV[1]   now in µs, or '' to use the server's clock (TIME)
-- then the limits of KEYS in runs (store/redis's "Settle arguments"):
--   algorithm code, its two parameters as take.lua has them, and n, the
--   number of keys in a row under that limit (the next n of KEYS); then
--   the slot of each of them ('' under a limit of another algorithm,
--   whose state it only reports)

local now = clock(ARGV[1])
local out, k, a = {}, 0, 2
local last = #ARGV
while a <= last do
  local code = ARGV[a]
  local alg = algorithms[code]
  if not alg then
    return redis.error_reply('sluice: unknown algorithm ' .. tostring(code))
  end
  local p1, p2 = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 4
  for _ = 1, tonumber(ARGV[a - 1]) do
    k = k + 1
    local key, slot, held = KEYS[k], ARGV[a], 0
    if code == 'c' and slot ~= '' then
      local ends = redis.call('ZSCORE', key, slot)
      if ends and tonumber(ends) > now then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now))
        redis.call('ZADD', key, fmt('%d', now + p2), slot)
        local top = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
        redis.call('PEXPIRE', key, fmt('%d', ceil((top - now) / 1000)))
        held = 1
      end
    end
    local _, rem, reset, retry = alg[1](key, now, p1, p2, 0)
    out[4 * k - 3], out[4 * k - 2], out[4 * k - 1], out[4 * k] = held, rem, reset, retry
    a = a + 1
  end
end
return out
