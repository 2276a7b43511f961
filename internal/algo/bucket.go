package algo

import (
	"math"

	"github.com/sluice-go/sluice"
)

// Token bucket and GCRA measure tokens in microseconds of refill: a bucket
// of capacity c with interval t (µs per token) holds at most c×t, gains one
// unit per µs, and a request of cost n takes n×t. Everything stays an exact
// integer, and both algorithms return identical Results for identical
// inputs: GCRA's theoretical arrival time is last + debt.
//
// Both store what the client owes, its debt (µs of refill until the bucket
// is full), with the interval it is measured in, and never its capacity:
// so a limit whose Limit or Burst changes (same algorithm and period, the
// same storage identity) keeps what every client has spent. A debt
// measured at another interval is converted on read to the same number of
// tokens at the new one (rescale); a new capacity applies as it is, to the
// same debt. Raised from 100 to 150 per hour, a client that spent 80 has
// 70 left; lowered to 50, it owes more than the bucket holds and is denied
// until the debt has drained below the new capacity.

// maxDebt bounds a debt: 2^51 µs (71 years), sluice's bound on Burst ×
// Interval, so that a time plus a debt plus a bucket stays an exact
// integer below 2^53 in Lua. Only a debt converted from a much shorter
// interval, or a clock that jumped back by decades, reaches it.
const maxDebt = 1 << 51

// rescale converts debt, µs of refill at interval from, into µs of refill
// at interval to: the same tokens owed, debt×to/from rounded up (never in
// the client's favour), at most maxDebt. Whole tokens convert exactly, and
// so does the part of a token left over while its product with to is
// below 2^53 (always when from×to is: both intervals under 94s, say);
// beyond, float64 cannot hold the product, and the result is the exact
// ceiling or 1µs more. Mirrored by rescale in common.lua, in the same
// float64 operations.
func rescale(debt, from, to int64) int64 {
	debt = min(debt, maxDebt)
	if from == to || debt <= 0 {
		return debt
	}
	whole := debt / from
	part := debt - whole*from // < from: a fraction of a token
	if float64(float64(whole)*float64(to)) >= maxDebt {
		return maxDebt
	}
	// part×to/from < to < 2^49: the quotient of an exact product rounds up
	// exactly; beyond 2^53 its float64 error is below 1/8, and adding 1/2
	// before rounding up keeps it at least the exact quotient and below
	// the quotient plus 1.
	p := float64(float64(part) * float64(to))
	var q float64
	if p < 1<<53 {
		q = math.Ceil(p / float64(from))
	} else {
		q = math.Ceil(p/float64(from) + 0.5)
	}
	return min(whole*to+int64(q), maxDebt)
}

// tbDebt returns the debt of token-bucket state st at now, in µs of
// refill at interval. State: A the debt at B, the time of the last
// update, measured at interval C. A clock that stepped back behind B adds
// to the debt: the bucket refills only as time moves forward.
func tbDebt(st *State, now, interval int64) int64 {
	if !st.Set || st.C <= 0 {
		return 0
	}
	return rescale(max(st.A-(now-st.B), 0), st.C, interval)
}

// gcraDebt returns the debt of GCRA state st at now, in µs of refill at
// interval. State: A the theoretical arrival time, the instant at which the
// bucket is full again, measured at interval B.
func gcraDebt(st *State, now, interval int64) int64 {
	if !st.Set || st.B <= 0 {
		return 0
	}
	return rescale(max(st.A-now, 0), st.B, interval)
}

// tokenBucket mirrors token_bucket.lua.
func tokenBucket(st *State, now, interval, capacity, cost int64, out *Outcome) {
	full := capacity * interval
	tokens := full - tbDebt(st, now, interval) // negative under a lowered limit
	need := cost * interval
	if tokens < need {
		out.R, out.Next, out.TTL = result(false, capacity, max(tokens, 0)/interval, full-tokens, need-tokens), *st, 0
		return
	}
	tokens -= need
	reset := full - tokens
	if reset <= 0 {
		out.R, out.Next, out.TTL = result(true, capacity, capacity, 0, 0), State{}, 0
		return
	}
	out.R, out.Next, out.TTL = result(true, capacity, tokens/interval, reset, 0), tbState(reset, now, interval), reset
}

// gcra mirrors gcra.lua.
func gcra(st *State, now, interval, capacity, cost int64, out *Outcome) {
	full := capacity * interval
	tat := now + gcraDebt(st, now, interval)
	newTAT := tat + cost*interval
	if allowAt := newTAT - full; now < allowAt {
		out.R, out.Next, out.TTL = result(false, capacity, max(full-(tat-now), 0)/interval, tat-now, allowAt-now), *st, 0
		return
	}
	reset := newTAT - now
	if reset <= 0 {
		out.R, out.Next, out.TTL = result(true, capacity, capacity, 0, 0), State{}, 0
		return
	}
	out.R, out.Next, out.TTL = result(true, capacity, (full-reset)/interval, reset, 0), gcraState(newTAT, interval), reset
}

func tbState(debt, now, interval int64) State {
	return State{Set: true, A: debt, B: now, C: interval}
}

func gcraState(tat, interval int64) State { return State{Set: true, A: tat, B: interval} }

// Convert returns st as a decision under l at now reads it, and whether
// the store must write it before deciding: token_bucket or gcra state
// measured at another interval than l's (its Limit changed) is converted
// to l's, keeping the debt in tokens. The store stores next for ttl µs
// (ttl <= 0: deletes it) whatever the decision, as the Lua scripts do as
// they read such state: a denied request writes nothing else, and from its
// first decision under l the state must drain at l's rate and live as long
// as its debt at l's interval, so that the RetryAfter given holds.
func Convert(l sluice.Limit, st State, now int64) (next State, ttl int64, ok bool) {
	sp := SpecOf(l)
	return sp.Convert(st, now)
}

// Stale reports whether Convert converts st under the limit of sp:
// token_bucket or gcra state measured at another interval. (Counts mean
// the same under any limit.)
func (sp *Spec) Stale(st *State) bool {
	return st.Set && (sp.alg == gcraKind && st.B != sp.period || sp.alg == tokenBucketKind && st.C != sp.period)
}

// Convert is Convert of the limit of sp.
func (sp *Spec) Convert(st State, now int64) (next State, ttl int64, ok bool) {
	if !sp.Stale(&st) {
		return st, 0, false
	}
	interval := sp.period
	var debt int64
	if sp.alg == gcraKind {
		debt = gcraDebt(&st, now, interval)
		next = gcraState(now+debt, interval)
	} else {
		debt = tbDebt(&st, now, interval)
		next = tbState(debt, now, interval)
	}
	if debt <= 0 {
		return State{}, 0, true
	}
	return next, debt, true
}
