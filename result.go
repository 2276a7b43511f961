package sluice

import "time"

// Result is the outcome of one decision under one Limit.
type Result struct {
	// Allowed reports whether the request was admitted. A denied request
	// consumes nothing.
	Allowed bool
	// Limit is the most requests the limit admits at one instant: Burst for
	// TokenBucket and GCRA, Limit for the window algorithms (Limit.Capacity).
	Limit int
	// Remaining is how many more cost-1 requests would be admitted right now,
	// after this one.
	Remaining int
	// ResetAfter is the time until the limit is fully recovered (the window
	// ends, the log empties, the bucket is full) if nothing else is admitted.
	// Zero means it already is.
	ResetAfter time.Duration
	// RetryAfter is zero when Allowed. Otherwise it is the exact wait after
	// which this same request would be admitted, if nothing else happened:
	// admitted at now+RetryAfter, denied a microsecond earlier.
	RetryAfter time.Duration
	// Degraded is NotDegraded when the store made this decision; otherwise
	// the store failed and it says which ErrorPolicy decided instead.
	// Remaining, ResetAfter and RetryAfter are then not the store's state:
	// made up under DegradedAllow and DegradedDeny, the local fallback's
	// under DegradedLocal.
	Degraded Degradation
}

// MultiResult is the outcome of Limiter.AllowAll and AllowParts: several
// limits decided in one store call, all or nothing.
type MultiResult struct {
	// Result is the binding limit's Result: when denied, the denying limit
	// with the longest RetryAfter (the wait until every limit admits the
	// request); when allowed, the limit with the fewest Remaining. Its
	// Allowed is true only if every limit admitted the request.
	Result
	// Binding is the index of the binding limit in Results.
	Binding int
	// Results holds one Result per limit, in the order given. When the
	// request is denied nothing is consumed, and a limit that alone would
	// have admitted it reports Allowed with its unchanged state.
	Results []Result
}

// Combine returns the MultiResult of per-limit results, as AllowAll does:
// the binding result is, when any limit denies, the denying one with the
// longest RetryAfter, and otherwise the one with the fewest Remaining. rs
// must not be empty.
func Combine(rs []Result) MultiResult {
	allowed := true
	for _, r := range rs {
		allowed = allowed && r.Allowed
	}
	b := 0
	for i, r := range rs {
		cur := rs[b]
		switch {
		case !allowed && !r.Allowed && (cur.Allowed || r.RetryAfter > cur.RetryAfter):
			b = i
		case allowed && r.Remaining < cur.Remaining:
			b = i
		}
	}
	// rs[b].Allowed == allowed: when any limit denies, b is a denying one.
	return MultiResult{Result: rs[b], Binding: b, Results: rs}
}
