package algo

import (
	"math"
	"slices"
)

// Refund and Charge are what a store does for sluice.Store's Refund and
// Charge: give back units a take consumed, and consume units whatever the
// limit holds (a debt). refund.lua and charge.lua mirror them line for
// line, and the conformance suite proves that the stores agree.

// Unknown is the instant of a take that a refund does not know: a refund
// by key, rule and cost alone (Envoy's is_negative_hits). It gives back
// what the latest consumption took: from the window a take at now counts
// in, the newest entries of a log, and to a bucket up to full.
const Unknown int64 = math.MinInt64

// Refund returns st, the state a store read at now and converted to the
// limit of sp (Convert), with cost given back: what a take decided at
// taken (µs; Unknown) consumed, whose Result had ResetAfter reset (µs;
// read by token_bucket and gcra). ok is false when nothing changes: the
// store then writes nothing; otherwise it stores next for ttl µs (ttl <=
// 0: deletes it).
//
// A refund never gives back more than the take consumed, and never to
// state that is not the take's:
//
//   - fixed_window gives back to the window taken counted in (Unknown:
//     the window a take at now counts in), only if it still holds at
//     least cost; a refund after that window ended changes nothing.
//   - sliding_window gives back to taken's window, the current or the
//     previous one, only if it holds at least cost (Unknown: the current
//     window).
//   - sliding_log removes cost entries at taken, only if it holds that
//     many (Unknown: the newest cost live entries, if there are as many).
//   - token_bucket and gcra give back cost tokens less what the bucket,
//     had the take never happened, would have refilled beyond full since
//     taken: min(cost, reset − (now − taken)) in µs of refill (Unknown:
//     cost), capped at a full bucket. refund.lua has the proof that this
//     never exceeds the exact refund.
//
// Otherwise it changes nothing: the state was reset, expired or replaced
// since the take, which errs towards denying.
func (sp *Spec) Refund(st State, now, taken, reset, cost int64) (next State, ttl int64, ok bool) {
	if !st.Set || cost <= 0 {
		return st, 0, false
	}
	switch sp.alg {
	case concurrencyKind:
		return st, 0, false // a slot is released by its name: Release
	case fixedWindowKind:
		w := st.A
		if taken == Unknown && w < floorDiv(now, sp.period) || taken != Unknown && w != floorDiv(taken, sp.period) || st.B < cost {
			return st, 0, false
		}
		if c := st.B - cost; c > 0 {
			return State{Set: true, A: w, B: c}, (w+1)*sp.period - now, true
		}
		return State{}, 0, true
	case slidingWindowKind:
		w, prev, cur := st.A, st.B, st.C
		switch {
		case taken == Unknown && w >= floorDiv(now, sp.period) && cur >= cost:
			cur -= cost
		case taken != Unknown && w == floorDiv(taken, sp.period) && cur >= cost:
			cur -= cost
		case taken != Unknown && w == floorDiv(taken, sp.period)+1 && prev >= cost:
			prev -= cost
		default:
			return st, 0, false
		}
		if reset := swReset(prev, cur, w, now, sp.period); reset > 0 {
			return State{Set: true, A: w, B: prev, C: cur}, reset, true
		}
		return State{}, 0, true
	case slidingLogKind:
		log := st.Log
		if taken == Unknown {
			live, _ := slices.BinarySearch(log, now-sp.period+1)
			if int64(len(log)-live) < cost {
				return st, 0, false
			}
			log = log[:len(log)-int(cost)]
		} else {
			lo, _ := slices.BinarySearch(log, taken)
			hi, _ := slices.BinarySearch(log, taken+1)
			if int64(hi-lo) < cost {
				return st, 0, false
			}
			log = slices.Delete(log, hi-int(cost), hi)
		}
		if len(log) == 0 || log[len(log)-1]+sp.period <= now {
			return State{}, 0, true
		}
		return State{Set: true, Log: log}, log[len(log)-1] + sp.period - now, true
	default: // token_bucket, gcra
		interval := sp.period
		give := cost * interval
		if taken != Unknown {
			give = min(give, reset-(now-taken))
		}
		debt := sp.debt(&st, now)
		if give <= 0 || debt <= 0 {
			return st, 0, false
		}
		return sp.bucket(max(debt-give, 0), now)
	}
}

// Charge returns st, the state a store read at now and converted to the
// limit of sp (Convert), with cost consumed whatever the limit holds: the
// state to store for ttl µs (ttl <= 0: delete it). A window's count and a
// log may exceed the limit, and a bucket's debt its capacity (up to
// maxDebt): later requests are denied, with a RetryAfter that says when,
// until the debt is repaid, as under a lowered limit. A Concurrency limit
// is not charged.
func (sp *Spec) Charge(st State, now, cost int64) (next State, ttl int64) {
	switch sp.alg {
	case concurrencyKind: // not charged: its leases as they are
		next, ttl, _ := leases(leasesAfter(st.Log, now), now)
		return next, ttl
	case fixedWindowKind:
		w := floorDiv(now, sp.period)
		if st.Set && st.A > w {
			w = st.A
		}
		count := cost
		if st.Set && st.A == w {
			count += st.B
		}
		if count == 0 {
			return State{}, 0
		}
		return State{Set: true, A: w, B: count}, (w+1)*sp.period - now
	case slidingWindowKind:
		w, _ := swAt(&st, now, sp.period)
		prev, cur := swCounts(&st, w)
		cur += cost
		if reset := swReset(prev, cur, w, now, sp.period); reset > 0 {
			return State{Set: true, A: w, B: prev, C: cur}, reset
		}
		return State{}, 0
	case slidingLogKind:
		live, _ := slices.BinarySearch(st.Log, now-sp.period+1)
		if len(st.Log)-live == 0 && cost == 0 {
			return State{}, 0
		}
		next := logAppend(st.Log[live:], now, cost)
		return State{Set: true, Log: next}, next[len(next)-1] + sp.period - now
	default: // token_bucket, gcra
		next, ttl, _ := sp.bucket(min(sp.debt(&st, now)+cost*sp.period, maxDebt), now)
		return next, ttl
	}
}

// debt returns the debt of bucket state st at now, in µs of refill at the
// interval of sp (a token_bucket's or a gcra's).
func (sp *Spec) debt(st *State, now int64) int64 {
	if sp.alg == gcraKind {
		return gcraDebt(st, now, sp.period)
	}
	return tbDebt(st, now, sp.period)
}

// bucket returns the state of a bucket of sp that owes debt at now, and
// its lifetime: none when it owes nothing.
func (sp *Spec) bucket(debt, now int64) (State, int64, bool) {
	if debt <= 0 {
		return State{}, 0, true
	}
	if sp.alg == gcraKind {
		return gcraState(now+debt, sp.period), debt, true
	}
	return tbState(debt, now, sp.period), debt, true
}
