package algo

import (
	"slices"

	"github.com/sluice-go/sluice"
)

// slidingLog mirrors sliding_log.lua. State: Log, the times of admitted
// requests, one entry per unit of cost, ascending; entries at or before
// now−period have expired.
func slidingLog(st State, now, limit, period, cost int64) (sluice.Result, State, int64) {
	live, _ := slices.BinarySearch(st.Log, now-period+1) // first entry > now−period
	n := int64(len(st.Log) - live)
	if n+cost > limit {
		// The k-th oldest live entry must expire before cost fits.
		k := n + cost - limit
		newest := st.Log[len(st.Log)-1]
		return result(false, limit, max(limit-n, 0), newest+period-now, st.Log[live+int(k)-1]+period-now), st, 0
	}
	if n+cost == 0 {
		return result(true, limit, limit, 0, 0), State{}, 0
	}
	next := st.Log[live:]
	at := len(next)
	if at > 0 && next[at-1] > now {
		// A clock went backwards: copy rather than shift entries that an
		// uncommitted decision must not disturb.
		at, _ = slices.BinarySearch(next, now+1)
		next = slices.Clone(next)
	}
	for range cost {
		next = slices.Insert(next, at, now)
	}
	reset := next[len(next)-1] + period - now
	return result(true, limit, limit-n-cost, reset, 0), State{Set: true, Log: next}, reset
}
