-- refund_first.lua: refund.lua's script over the first keys and
-- arguments, then batch.lua's over the rest, in one call: a coalesced
-- batch of decisions that carries refunds too (coalesce.go). Its ARGV:
--
-- ARGV[1]   the refunds' now in µs, or '' for the server's clock
-- ARGV[2]   S, the number of the refunds' runs arguments that follow
-- ARGV[3] .. ARGV[2 + S]   their runs (refund.lua's ARGV after now)
-- then batch.lua's ARGV, its keys after the refunds'
--
-- It replies four integers per refund, then batch.lua's.
local s = tonumber(ARGV[2])
local k, err = refund_runs(clock(ARGV[1]), 3, 2 + s, 0, before_out)
if err then
  return err
end
before_args, before_keys = 2 + s, k
