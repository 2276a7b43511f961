// Package algo holds the five rate-limiting algorithms and the
// concurrency limit as pure functions of (state, now, limit, cost). The memory store runs them directly; each Lua
// script of the Redis store mirrors one of them line for line, and the
// conformance suite (package storetest) proves that the two agree.
//
// Time is integer microseconds. Arithmetic that Lua does in float64 is done
// here in float64 too, in the same order, so both round identically.
package algo

import (
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
)

// State is the stored state of one limit for one key. The zero State is a
// key that has no state (never seen, expired or reset).
type State struct {
	// Set reports whether the state exists.
	Set bool
	// A, B and C hold the algorithm's integers:
	//   fixed_window:   A window index, B count
	//   sliding_window: A window index, B previous window's count, C count
	//   token_bucket:   A debt (µs of refill) at B, the time of the last
	//                   update, C the interval the debt is measured in
	//   gcra:           A theoretical arrival time, B the interval
	A, B, C int64
	// Log holds sliding_log's admitted request times, ascending; and
	// concurrency's leases, two integers each (see concurrency).
	Log []int64
}

// Check decides a request of cost at now (µs) under l, a validated limit.
// It returns the Result, the state to store if the caller commits the
// decision, and how long that state must live in µs (ttl <= 0: delete the
// state, it is equivalent to none). When r.Allowed is false, next is st.
// A store calls Convert first, and writes what it converts.
func Check(l sluice.Limit, st State, now, cost int64) (r sluice.Result, next State, ttl int64) {
	return CheckSlot(l, st, now, cost, 0)
}

// CheckSlot is Check of a take that holds slot (not 0) under a
// Concurrency limit; the other algorithms do not read it.
func CheckSlot(l sluice.Limit, st State, now, cost, slot int64) (r sluice.Result, next State, ttl int64) {
	sp := SpecOf(l)
	var out Outcome
	sp.CheckSlot(&st, now, cost, slot, &out)
	return out.R, out.Next, out.TTL
}

// Outcome is what Check returns: the Result, the state to store if the
// decision is committed, and how long it must live in µs (TTL <= 0:
// delete it). When R.Allowed is false, Next is the state decided on.
type Outcome struct {
	R    sluice.Result
	Next State
	TTL  int64
}

// Spec is a validated limit as the algorithms read it, its numbers
// worked out once (a token interval is a division) for a decision that
// reads them twice, in Convert and in Check.
type Spec struct {
	alg    kind
	limit  int64 // Limit (window algorithms), or capacity (token_bucket, gcra)
	period int64 // Period in µs (window algorithms), or interval in µs
}

type kind uint8

const (
	tokenBucketKind kind = iota
	fixedWindowKind
	slidingWindowKind
	slidingLogKind
	gcraKind
	concurrencyKind
)

// SpecOf returns the Spec of l, a validated limit.
func SpecOf(l sluice.Limit) Spec {
	switch l.Algorithm {
	case sluice.FixedWindow:
		return Spec{fixedWindowKind, int64(l.Limit), micros(l.Period)}
	case sluice.SlidingWindow:
		return Spec{slidingWindowKind, int64(l.Limit), micros(l.Period)}
	case sluice.SlidingLog:
		return Spec{slidingLogKind, int64(l.Limit), micros(l.Period)}
	case sluice.GCRA:
		return Spec{gcraKind, int64(l.Capacity()), micros(l.Interval())}
	case sluice.Concurrency:
		return Spec{concurrencyKind, int64(l.Limit), micros(l.SlotTTL())}
	default:
		return Spec{tokenBucketKind, int64(l.Capacity()), micros(l.Interval())}
	}
}

// Check is Check of the limit of sp, of state *st, into *out (written
// in place: no copies of states and results on the way).
func (sp *Spec) Check(st *State, now, cost int64, out *Outcome) {
	sp.CheckSlot(st, now, cost, 0, out)
}

// CheckSlot is Check of a take that holds slot under a Concurrency limit.
func (sp *Spec) CheckSlot(st *State, now, cost, slot int64, out *Outcome) {
	switch sp.alg {
	case concurrencyKind:
		concurrency(st, now, sp.limit, sp.period, cost, slot, out)
	case fixedWindowKind:
		fixedWindow(st, now, sp.limit, sp.period, cost, out)
	case slidingWindowKind:
		slidingWindow(st, now, sp.limit, sp.period, cost, out)
	case slidingLogKind:
		slidingLog(st, now, sp.limit, sp.period, cost, out)
	case gcraKind:
		gcra(st, now, sp.period, sp.limit, cost, out)
	default:
		tokenBucket(st, now, sp.period, sp.limit, cost, out)
	}
}

// ID returns the storage identity of l, l.Identity(), in string form:
// the algorithm's letter (keyLetter), the period, and ":" and the name if
// l has one, for example "f1m", "t1500ms" or "g1h:api". The period is a
// whole number of the largest unit that divides it: d (24h), h, m, s, ms
// or us. Two valid limits have equal IDs if and only if their Identities
// are equal: the letter is one character, the number ends at the unit,
// whose letters are not digits, and a name (letters, digits, '-', '_' and
// '.') follows the first ':' (TestIDInjective). It holds neither Limit nor
// Burst, so that a limit raised or lowered keeps the state spent under it:
// every algorithm reads the state of another Limit or Burst (see Convert).
// It is short because it is part of every Redis key, and Redis memory per
// key grows with the key's length.
func ID(l sluice.Limit) string {
	return string(AppendID(make([]byte, 0, 16+len(l.Name)), l))
}

// AppendID appends ID(l) to b, for a caller that builds a longer string
// around it (a Redis key) in one buffer.
func AppendID(b []byte, l sluice.Limit) []byte {
	n := l.Identity()
	b = append(b, keyLetter(n.Algorithm))
	if n.Algorithm != sluice.Concurrency { // whose lease is no part of it
		b = appendPeriod(b, micros(n.Period))
	}
	if n.Name != "" {
		b = append(b, ':')
		b = append(b, n.Name...)
	}
	return b
}

// periodUnits are the units of a period in an ID, largest first.
var periodUnits = []struct {
	us   int64
	name string
}{
	{86_400_000_000, "d"},
	{3_600_000_000, "h"},
	{60_000_000, "m"},
	{1_000_000, "s"},
	{1_000, "ms"},
	{1, "us"},
}

// appendPeriod appends p µs (> 0) as a whole number of the largest unit
// that divides it.
func appendPeriod(b []byte, p int64) []byte {
	for _, u := range periodUnits {
		if p%u.us == 0 {
			b = strconv.AppendInt(b, p/u.us, 10)
			return append(b, u.name...)
		}
	}
	return b // unreachable: every p is a whole number of µs
}

// keyLetter returns the letter that stands for an algorithm at the start
// of an ID: its Code.
func keyLetter(a sluice.Algorithm) byte { return Code(a)[0] }

// Code returns the one-letter name of an algorithm, the one vocabulary of
// storage keys (ID) and of the Redis scripts' arguments and tables: f
// fixed_window, w sliding_window, l sliding_log, g gcra, t token_bucket
// (and the zero Algorithm).
func Code(a sluice.Algorithm) string {
	switch a {
	case sluice.FixedWindow:
		return "f"
	case sluice.SlidingWindow:
		return "w"
	case sluice.SlidingLog:
		return "l"
	case sluice.GCRA:
		return "g"
	case sluice.Concurrency:
		return "c"
	default:
		return "t"
	}
}

// Params returns the two numbers the Redis script of l's algorithm takes:
// limit and period (µs) for the window algorithms, interval (µs) and
// capacity for token_bucket and gcra, limit and lease (µs) for
// concurrency.
func Params(l sluice.Limit) (int64, int64) {
	if l.Algorithm == sluice.Concurrency {
		return int64(l.Limit), micros(l.SlotTTL())
	}
	if n := l.Normalized(); n.Burst != 0 {
		return micros(l.Interval()), int64(n.Burst)
	}
	return int64(l.Limit), micros(l.Period)
}

func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// result builds a Result from µs values.
func result(allowed bool, limit, remaining, resetAfter, retryAfter int64) sluice.Result {
	return sluice.Result{
		Allowed:    allowed,
		Limit:      int(limit),
		Remaining:  int(remaining),
		ResetAfter: time.Duration(resetAfter) * time.Microsecond,
		RetryAfter: time.Duration(retryAfter) * time.Microsecond,
	}
}

// floorDiv is a/b rounded down, as Lua's math.floor(a / b) for exact
// integers.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
