// Package algo holds the five rate-limiting algorithms as pure functions of
// (state, now, limit, cost). The memory store runs them directly; each Lua
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
	//   token_bucket:   A tokens × interval (µs of refill), B time of last update
	//   gcra:           A theoretical arrival time
	A, B, C int64
	// Log holds sliding_log's admitted request times, ascending.
	Log []int64
}

// Check decides a request of cost at now (µs) under l, a validated limit.
// It returns the Result, the state to store if the caller commits the
// decision, and how long that state must live in µs (ttl <= 0: delete the
// state, it is equivalent to none). When r.Allowed is false, next is st.
func Check(l sluice.Limit, st State, now, cost int64) (r sluice.Result, next State, ttl int64) {
	switch l.Algorithm {
	case sluice.FixedWindow:
		return fixedWindow(st, now, int64(l.Limit), micros(l.Period), cost)
	case sluice.SlidingWindow:
		return slidingWindow(st, now, int64(l.Limit), micros(l.Period), cost)
	case sluice.SlidingLog:
		return slidingLog(st, now, int64(l.Limit), micros(l.Period), cost)
	case sluice.GCRA:
		return gcra(st, now, micros(l.Interval()), int64(l.Capacity()), cost)
	default:
		return tokenBucket(st, now, micros(l.Interval()), int64(l.Capacity()), cost)
	}
}

// ID returns the storage identity of l, l.Normalized(), in string form:
// [name:]code:limit:period_µs[:burst], the burst for token_bucket and gcra
// only. Two valid limits have equal IDs if and only if their Normalized
// forms are equal. It holds the name and every parameter, so a changed
// limit starts from fresh state instead of misreading old state.
func ID(l sluice.Limit) string {
	n := l.Normalized()
	b := make([]byte, 0, 48)
	if n.Name != "" {
		b = append(b, n.Name...)
		b = append(b, ':')
	}
	b = append(b, Code(n.Algorithm)...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(n.Limit), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, micros(n.Period), 10)
	if n.Burst != 0 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(n.Burst), 10)
	}
	return string(b)
}

// Code returns the short name of an algorithm used in storage keys and in
// the Redis scripts' arguments.
func Code(a sluice.Algorithm) string {
	switch a {
	case sluice.FixedWindow:
		return "fw"
	case sluice.SlidingWindow:
		return "sw"
	case sluice.SlidingLog:
		return "sl"
	case sluice.GCRA:
		return "gcra"
	default:
		return "tb"
	}
}

// Params returns the two numbers the Redis script of l's algorithm takes:
// limit and period (µs) for the window algorithms, interval (µs) and
// capacity for token_bucket and gcra.
func Params(l sluice.Limit) (int64, int64) {
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
