package algo

import "github.com/sluice-go/sluice"

// Token bucket and GCRA measure tokens in microseconds of refill: a bucket
// of capacity c with interval t (µs per token) holds at most c×t, gains one
// unit per µs, and a request of cost n takes n×t. Everything stays an exact
// integer, and both algorithms return identical Results for identical
// inputs: GCRA's theoretical arrival time is last + c×t − tokens.

// tokenBucket mirrors token_bucket.lua. State: A tokens (µs of refill),
// B time of the last update.
func tokenBucket(st State, now, interval, capacity, cost int64) (sluice.Result, State, int64) {
	full := capacity * interval
	tokens := full
	if st.Set {
		tokens = min(full, st.A+(now-st.B))
	}
	need := cost * interval
	if tokens < need {
		return result(false, capacity, max(tokens, 0)/interval, full-tokens, need-tokens), st, 0
	}
	tokens -= need
	reset := full - tokens
	if reset <= 0 {
		return result(true, capacity, capacity, 0, 0), State{}, 0
	}
	return result(true, capacity, tokens/interval, reset, 0), State{Set: true, A: tokens, B: now}, reset
}

// gcra mirrors gcra.lua. State: A theoretical arrival time (µs), the
// instant at which the bucket is full again.
func gcra(st State, now, interval, capacity, cost int64) (sluice.Result, State, int64) {
	full := capacity * interval
	tat := now
	if st.Set && st.A > now {
		tat = st.A
	}
	newTAT := tat + cost*interval
	if allowAt := newTAT - full; now < allowAt {
		return result(false, capacity, max(full-(tat-now), 0)/interval, tat-now, allowAt-now), st, 0
	}
	reset := newTAT - now
	if reset <= 0 {
		return result(true, capacity, capacity, 0, 0), State{}, 0
	}
	return result(true, capacity, (full-reset)/interval, reset, 0), State{Set: true, A: newTAT}, reset
}
