-- peek.lua runs before take.lua (the script "peek+take"): it makes
-- take.lua reply what it would reply for the same KEYS and ARGV while
-- writing nothing: no decision is committed, and bucket_debt converts a
-- bucket kept under another limit without storing it. The script then
-- runs only reading commands (GET, TIME, and for sliding_log ZCOUNT,
-- ZRANGE, ZRANGEBYSCORE), all of which take.lua runs too.

read_only = true
