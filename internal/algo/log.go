package algo

import (
	"slices"
)

// slidingLog mirrors sliding_log.lua. State: Log, the times of admitted
// requests, one entry per unit of cost, ascending; entries at or before
// now−period have expired. Under a lowered limit the log may hold more
// live entries than the limit: a request waits for the oldest of them to
// expire until cost fits.
func slidingLog(st *State, now, limit, period, cost int64, out *Outcome) {
	live, _ := slices.BinarySearch(st.Log, now-period+1) // first entry > now−period
	n := int64(len(st.Log) - live)
	if n+cost > limit {
		// The k-th oldest live entry must expire before cost fits.
		k := n + cost - limit
		newest := st.Log[len(st.Log)-1]
		out.R, out.Next, out.TTL = result(false, limit, max(limit-n, 0), newest+period-now, st.Log[live+int(k)-1]+period-now), *st, 0
		return
	}
	if n+cost == 0 {
		out.R, out.Next, out.TTL = result(true, limit, limit, 0, 0), State{}, 0
		return
	}
	next := logAppend(st.Log[live:], now, cost)
	reset := next[len(next)-1] + period - now
	out.R, out.Next, out.TTL = result(true, limit, limit-n-cost, reset, 0), State{Set: true, Log: next}, reset
}

// fill sets every element of s to v.
func fill(s []int64, v int64) {
	for i := range s {
		s[i] = v
	}
}

// logAppend returns log, the live entries of a sliding_log state, with
// cost entries at now, in order.
func logAppend(log []int64, now, cost int64) []int64 {
	if at := len(log); at > 0 && log[at-1] > now {
		// A clock went backwards: build the log anew rather than shift
		// entries that an uncommitted decision must not disturb, with the
		// cost's entries after those at or before now.
		at, _ = slices.BinarySearch(log, now+1)
		grown := make([]int64, len(log)+int(cost))
		copy(grown, log[:at])
		fill(grown[at:at+int(cost)], now)
		copy(grown[at+int(cost):], log[at:])
		return grown
	}
	log = slices.Grow(log, int(cost))
	for range cost {
		log = append(log, now)
	}
	return log
}
