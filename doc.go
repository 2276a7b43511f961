// Package sluice is a rate limiter whose limits hold across replicas.
//
// An in-memory limiter silently multiplies its limit by the number of
// replicas behind a load balancer: each counts alone. sluice keeps the count
// in a shared Store (package store/redis) and makes every decision one
// atomic step there, so 100 per minute means 100 per minute whether 1 or 40
// replicas serve the traffic. The in-process store (package store/memory)
// has the same semantics for a single replica, for tests, and as a fallback
// while Redis is unreachable.
//
// # Use
//
// Create one Limiter over a store and share it:
//
//	lim := sluice.New(memory.New())
//	res, err := lim.Allow(ctx, "user:42", sluice.PerMinute(100))
//	if err != nil { ... }       // invalid limit, or the store failed (see ErrorPolicy)
//	if !res.Allowed { ... }     // answer 429; retry after res.RetryAfter
//
// AllowN spends a cost other than 1; AllowAll checks several limits (10 per
// second AND 1000 per hour) in one atomic call, all or nothing; Peek tells
// what the next request would get without spending anything; Reset
// forgets a key.
//
// # Algorithms
//
//	fixed_window    count per window aligned to the epoch; cheapest; 2×limit possible across a boundary
//	sliding_window  weighted count of this and the previous window; cheap; close to a true sliding window
//	sliding_log     one entry per admitted request; exact; memory grows with the limit
//	token_bucket    refills limit per period up to burst; allows bursts, enforces the average (the default)
//	gcra            the token bucket's decisions with less state (one time)
//
// # Semantics
//
// Every store gives identical Results (the conformance suite in package
// storetest is the judge). A denied request consumes nothing. RetryAfter is
// exact: the same request is admitted at now+RetryAfter and denied a
// microsecond earlier, if nothing else happens. Time is integer
// microseconds; token_bucket and gcra regain a token every Period/Limit
// rounded up to the microsecond (Limit.Interval), so their long-run rate
// never exceeds Limit per Period (a full bucket still admits Burst at
// once). Limits that cannot be enforced (zero period, negative limit, burst
// on a window algorithm, a cost larger than the limit's capacity) are
// errors wrapping ErrInvalidLimit or ErrInvalidCost, never silent denials.
//
// # Changing limits
//
// A client's state lives under its limit's Identity: Name, Algorithm and
// Period. Raise or lower the Limit or the Burst (reload a policy file) and
// every client keeps what it has spent: 80 of 100 per hour spent leave 70
// under 150, and under 50 the client is denied until its window, log or
// bucket admits again; RetryAfter stays exact. A new algorithm, period or
// name starts every client afresh. See Limit.Identity.
//
// The guide to the library is docs/library.md (https://github.com/sluice-go/sluice/blob/main/docs/library.md).
package sluice
