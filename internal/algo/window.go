package algo

import (
	"math"
)

// Both window algorithms never move back to an older window: when a clock
// steps back behind the stored window (an NTP step, a failover to a server
// whose clock is behind), the stored window stays the current one, so that
// a step back cannot hand out a fresh window.
//
// Their state is a count, which a changed Limit reads as it is: raised,
// what was spent stays spent; lowered below the count, the window denies
// (with nothing Remaining) until the counts that exceed the new limit
// have left it, and its lifetime does not depend on the limit at all.

// fixedWindow mirrors fixed_window.lua. State: A window index, B count.
func fixedWindow(st *State, now, limit, period, cost int64, out *Outcome) {
	w := floorDiv(now, period)
	if st.Set && st.A > w {
		w = st.A
	}
	var count int64
	if st.Set && st.A == w {
		count = st.B
	}
	reset := (w+1)*period - now
	if count+cost > limit {
		out.R, out.Next, out.TTL = result(false, limit, max(limit-count, 0), reset, reset), *st, 0
		return
	}
	count += cost
	if count == 0 {
		out.R, out.Next, out.TTL = result(true, limit, limit, 0, 0), State{}, 0
		return
	}
	out.R, out.Next, out.TTL = result(true, limit, limit-count, reset, 0), State{Set: true, A: w, B: count}, reset
}

// swCounts returns the previous and current window counts at window w of
// the sliding-window state st.
func swCounts(st *State, w int64) (prev, cur int64) {
	switch {
	case !st.Set:
		return 0, 0
	case st.A == w:
		return st.B, st.C
	case st.A == w-1:
		return st.C, 0
	}
	return 0, 0
}

// swAllows reports whether cost fits at elapsed time e into the current
// window: prev×(period−e)/period + cur + cost <= limit, multiplied out by
// period and evaluated in float64 exactly as the Lua script does.
func swAllows(prev, cur, e, limit, period, cost int64) bool {
	lhs := float64(float64(prev)*float64(period-e)) + float64(float64(cur+cost)*float64(period))
	return lhs <= float64(float64(limit)*float64(period))
}

// swRemaining is floor(limit − cur − prev×(period−e)/period), at least 0.
func swRemaining(prev, cur, e, limit, period int64) int64 {
	r := math.Floor(float64(limit-cur) - float64(float64(prev)*float64(period-e))/float64(period))
	if r < 0 {
		return 0
	}
	return int64(r)
}

// swReset is the time until neither window holds a count.
func swReset(prev, cur, w, now, period int64) int64 {
	switch {
	case cur > 0:
		return (w+2)*period - now
	case prev > 0:
		return (w+1)*period - now
	}
	return 0
}

// swAt returns the window at t (never older than the stored one) and the
// time elapsed in it (0 when the stored window is ahead of t).
func swAt(st *State, t, period int64) (w, e int64) {
	w = floorDiv(t, period)
	if st.Set && st.A > w {
		w = st.A
	}
	return w, max(t-w*period, 0)
}

// slidingWindow mirrors sliding_window.lua. State: A window index, B the
// previous window's count, C the current window's count.
func slidingWindow(st *State, now, limit, period, cost int64, out *Outcome) {
	w, e := swAt(st, now, period)
	prev, cur := swCounts(st, w)
	if swAllows(prev, cur, e, limit, period, cost) {
		cur += cost
		reset := swReset(prev, cur, w, now, period)
		rem := swRemaining(prev, cur, e, limit, period)
		if reset <= 0 {
			out.R, out.Next, out.TTL = result(true, limit, rem, 0, 0), State{}, 0
			return
		}
		out.R, out.Next, out.TTL = result(true, limit, rem, reset, 0), State{Set: true, A: w, B: prev, C: cur}, reset
		return
	}
	// The estimate only falls as time passes, and two windows from now both
	// counts are gone, so the earliest admitting instant lies in
	// (now, (w+2)×period]: find it by bisection on whole microseconds.
	lo, hi := int64(1), (w+2)*period-now
	for lo < hi {
		mid := lo + (hi-lo)/2
		wt, et := swAt(st, now+mid, period)
		p, c := swCounts(st, wt)
		if swAllows(p, c, et, limit, period, cost) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	out.R, out.Next, out.TTL = result(false, limit, swRemaining(prev, cur, e, limit, period), swReset(prev, cur, w, now, period), lo), *st, 0
}
