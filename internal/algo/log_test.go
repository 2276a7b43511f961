package algo

import (
	"slices"
	"testing"
)

// TestSlidingLogClockBack: when the clock has stepped back, the cost's
// entries go after those at or before now, in a new log (the old one is
// the state of a decision that may not be committed), built with a single
// allocation whatever the cost.
func TestSlidingLogClockBack(t *testing.T) {
	const limit, period = 100, 1000
	st := State{Set: true, Log: []int64{10, 15, 20, 30}}
	var o Outcome
	slidingLog(&st, 15, limit, period, 3, &o)
	r, next, ttl := o.R, o.Next, o.TTL
	if want := []int64{10, 15, 15, 15, 15, 20, 30}; !r.Allowed || !slices.Equal(next.Log, want) || ttl != 30+period-15 {
		t.Errorf("slidingLog at 15, cost 3: %+v, log %v, ttl %d; want allowed, log %v, ttl %d", r, next.Log, ttl, want, 30+period-15)
	}
	if want := []int64{10, 15, 20, 30}; !slices.Equal(st.Log, want) {
		t.Errorf("slidingLog changed the log it was given: %v, want %v", st.Log, want)
	}
	if allocs := testing.AllocsPerRun(10, func() { var o Outcome; slidingLog(&st, 12, limit, period, 50, &o) }); allocs != 1 {
		t.Errorf("slidingLog with the clock back, cost 50: %v allocations, want 1", allocs)
	}
}
