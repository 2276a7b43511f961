package storetest

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

const (
	s = time.Second
	m = time.Minute
	h = time.Hour
)

// testAdmitsPerWindow: 5 per minute admits exactly 5 at once, then denies
// with the exact wait, then admits again when the limit recovers.
func testAdmitsPerWindow(t *testing.T, newStore Factory) {
	steps := map[sluice.Algorithm][]step{
		sluice.FixedWindow: {
			{0, 1, ok(4, m)}, {0, 1, ok(3, m)}, {0, 1, ok(2, m)}, {0, 1, ok(1, m)}, {0, 1, ok(0, m)},
			{0, 1, deny(0, m, m)},
			{59 * s, 1, deny(0, s, s)},
			{m, 1, ok(4, m)},
		},
		// The previous window's 5 weigh 5×(60−e)/60: one more fits at e = 12s.
		sluice.SlidingWindow: {
			{0, 1, ok(4, 2*m)}, {0, 1, ok(3, 2*m)}, {0, 1, ok(2, 2*m)}, {0, 1, ok(1, 2*m)}, {0, 1, ok(0, 2*m)},
			{0, 1, deny(0, 2*m, 72*s)},
			{m, 1, deny(0, m, 12*s)},
			{72 * s, 1, ok(0, 108*s)},
		},
		sluice.SlidingLog: {
			{0, 1, ok(4, m)}, {0, 1, ok(3, m)}, {0, 1, ok(2, m)}, {0, 1, ok(1, m)}, {0, 1, ok(0, m)},
			{0, 1, deny(0, m, m)},
			{59 * s, 1, deny(0, s, s)},
			{m, 1, ok(4, m)},
		},
		// One token every 12s.
		sluice.TokenBucket: {
			{0, 1, ok(4, 12*s)}, {0, 1, ok(3, 24*s)}, {0, 1, ok(2, 36*s)}, {0, 1, ok(1, 48*s)}, {0, 1, ok(0, m)},
			{0, 1, deny(0, m, 12*s)},
			{11 * s, 1, deny(0, 49*s, s)},
			{12 * s, 1, ok(0, m)},
		},
	}
	steps[sluice.GCRA] = steps[sluice.TokenBucket]
	each(t, func(t *testing.T, a sluice.Algorithm) {
		newEnv(t, newStore).run("client", sluice.PerMinute(5).Using(a), steps[a])
	})
}

// testBoundary: ten seconds before an hour ends a client spends its 5, and
// at the hour another 5: fixed_window admits 10 within 10s, sliding_log
// holds to 5, sliding_window to 5 as well.
func testBoundary(t *testing.T, newStore Factory) {
	before, at := h-10*s, h
	steps := map[sluice.Algorithm][]step{
		sluice.FixedWindow: {
			{before, 1, ok(4, 10*s)}, {before, 1, ok(3, 10*s)}, {before, 1, ok(2, 10*s)}, {before, 1, ok(1, 10*s)}, {before, 1, ok(0, 10*s)},
			{before, 1, deny(0, 10*s, 10*s)},
			{at, 1, ok(4, h)}, {at, 1, ok(3, h)}, {at, 1, ok(2, h)}, {at, 1, ok(1, h)}, {at, 1, ok(0, h)},
			{at, 1, deny(0, h, h)},
		},
		sluice.SlidingLog: {
			{before, 1, ok(4, h)}, {before, 1, ok(3, h)}, {before, 1, ok(2, h)}, {before, 1, ok(1, h)}, {before, 1, ok(0, h)},
			{before, 1, deny(0, h, h)},
			{at, 1, deny(0, h-10*s, h-10*s)}, {at, 1, deny(0, h-10*s, h-10*s)},
		},
		sluice.SlidingWindow: {
			{before, 1, ok(4, h+10*s)}, {before, 1, ok(3, h+10*s)}, {before, 1, ok(2, h+10*s)}, {before, 1, ok(1, h+10*s)}, {before, 1, ok(0, h+10*s)},
			{before, 1, deny(0, h+10*s, 12*m+10*s)},
			{at, 1, deny(0, h, 12*m)}, {at, 1, deny(0, h, 12*m)},
		},
	}
	// A bucket of 5 regaining one every 12 minutes has nothing to give 10s
	// later.
	steps[sluice.TokenBucket] = []step{
		{before, 1, ok(4, 12*m)}, {before, 1, ok(3, 24*m)}, {before, 1, ok(2, 36*m)}, {before, 1, ok(1, 48*m)}, {before, 1, ok(0, h)},
		{before, 1, deny(0, h, 12*m)},
		{at, 1, deny(0, h-10*s, 12*m-10*s)}, {at, 1, deny(0, h-10*s, 12*m-10*s)},
	}
	steps[sluice.GCRA] = steps[sluice.TokenBucket]
	each(t, func(t *testing.T, a sluice.Algorithm) {
		newEnv(t, newStore).run("client", sluice.PerHour(5).Using(a), steps[a])
	})
}

// testRefill: state recovers over time, at each algorithm's pace.
func testRefill(t *testing.T, newStore Factory) {
	t.Run("token_bucket burst", func(t *testing.T) {
		// 5 per minute (a token per 12s) with a burst of 10.
		for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
			var steps []step
			for i := range 10 {
				steps = append(steps, step{0, 1, ok(9-i, time.Duration(i+1)*12*s)})
			}
			steps = append(steps,
				step{0, 1, deny(0, 2*m, 12*s)},
				step{30 * s, 1, ok(1, 102*s)},
				step{30 * s, 1, ok(0, 114*s)},
				step{30 * s, 1, deny(0, 114*s, 6*s)},
				step{36 * s, 1, ok(0, 2*m)},
				step{1000 * s, 1, ok(9, 12*s)},
			)
			newEnv(t, newStore).run("client", sluice.PerMinute(5).WithBurst(10).Using(a), steps)
		}
	})
	t.Run("fixed_window starts afresh", func(t *testing.T) {
		newEnv(t, newStore).run("client", sluice.PerMinute(3).Using(sluice.FixedWindow), []step{
			{0, 3, ok(0, m)},
			{30 * s, 1, deny(0, 30*s, 30*s)},
			{m - time.Millisecond, 1, deny(0, time.Millisecond, time.Millisecond)},
			{m, 1, ok(2, m)},
		})
	})
	t.Run("sliding_log expires one by one", func(t *testing.T) {
		newEnv(t, newStore).run("client", sluice.PerMinute(3).Using(sluice.SlidingLog), []step{
			{0, 1, ok(2, m)},
			{10 * s, 1, ok(1, m)},
			{20 * s, 1, ok(0, m)},
			{30 * s, 1, deny(0, 50*s, 30*s)},
			{m, 1, ok(0, m)},
			{65 * s, 1, deny(0, 55*s, 5*s)},
			{70 * s, 1, ok(0, m)},
		})
	})
	t.Run("sliding_window decays", func(t *testing.T) {
		// 10 per minute; 10 in the first window weigh 10×(60−e)/60 in the
		// second.
		newEnv(t, newStore).run("client", sluice.PerMinute(10).Using(sluice.SlidingWindow), []step{
			{30 * s, 10, ok(0, 90*s)},
			{30 * s, 1, deny(0, 90*s, 36*s)},
			{m + 6*s, 1, ok(0, 114*s)},
			{m + 30*s, 3, ok(1, 90*s)},
			{3 * m, 1, ok(9, 2*m)},
		})
	})
}

// testCosts: requests of several units, a request that no longer fits while
// a smaller one does, and cost 0 reading the state.
func testCosts(t *testing.T, newStore Factory) {
	steps := map[sluice.Algorithm][]step{
		sluice.FixedWindow: {
			{0, 4, ok(6, m)}, {0, 4, ok(2, m)}, {0, 3, deny(2, m, m)}, {0, 2, ok(0, m)}, {0, 0, ok(0, m)},
		},
		sluice.SlidingWindow: {
			{0, 4, ok(6, 2*m)}, {0, 4, ok(2, 2*m)}, {0, 3, deny(2, 2*m, 67500*time.Millisecond)}, {0, 2, ok(0, 2*m)}, {0, 0, ok(0, 2*m)},
		},
		sluice.SlidingLog: {
			{0, 4, ok(6, m)}, {0, 4, ok(2, m)}, {0, 3, deny(2, m, m)}, {0, 2, ok(0, m)}, {0, 0, ok(0, m)},
		},
		sluice.TokenBucket: {
			{0, 4, ok(6, 24*s)}, {0, 4, ok(2, 48*s)}, {0, 3, deny(2, 48*s, 6*s)}, {0, 2, ok(0, m)}, {0, 0, ok(0, m)},
			{3 * s, 0, ok(0, 57*s)}, {6 * s, 0, ok(1, 54*s)},
		},
	}
	steps[sluice.GCRA] = steps[sluice.TokenBucket]
	each(t, func(t *testing.T, a sluice.Algorithm) {
		e := newEnv(t, newStore)
		l := sluice.PerMinute(10).Using(a)
		e.run("client", l, steps[a])
		_, err := e.lim.AllowN(context.Background(), "client", l, 11)
		if !errors.Is(err, sluice.ErrInvalidCost) {
			t.Errorf("AllowN(cost 11) on %s: err = %v, want ErrInvalidCost", l, err)
		}
	})
}

// testTTL: every piece of state lives exactly as long as its ResetAfter,
// the instant it becomes equivalent to none, and Reset removes it.
func testTTL(t *testing.T, newStore Factory) {
	each(t, func(t *testing.T, a sluice.Algorithm) {
		e := newEnv(t, newStore)
		l := sluice.PerHour(10).Using(a)
		ctx := context.Background()
		for _, at := range []time.Duration{0, 1000 * s, 1000 * s} {
			e.clock.Set(at)
			r, err := e.lim.Allow(ctx, "client", l)
			if err != nil || !r.Allowed {
				t.Fatalf("Allow at %v = %+v, %v", at, r, err)
			}
			e.checkTTL("client", l, r)
		}
		if err := e.lim.Reset(ctx, "client", l); err != nil {
			t.Fatal(err)
		}
		if got, err := e.ttler().TTL(ctx, "client", l); err != nil || got != 0 {
			t.Errorf("TTL after Reset = %v, %v; want 0 (no state)", got, err)
		}
	})
}

// testMulti: limits checked together admit only when all admit, and a
// denied request consumes from none.
func testMulti(t *testing.T, newStore Factory) {
	t.Run("sliding_log and fixed_window", func(t *testing.T) {
		e := newEnv(t, newStore)
		perMin := sluice.PerMinute(5).Using(sluice.SlidingLog)
		perHour := sluice.PerHour(7).Using(sluice.FixedWindow)
		type mstep struct {
			at      time.Duration
			allowed bool
			binding int
			want    [2]sluice.Result
		}
		steps := []mstep{
			{0, true, 0, [2]sluice.Result{ok(4, m), ok(6, h)}},
			{0, true, 0, [2]sluice.Result{ok(3, m), ok(5, h)}},
			{0, true, 0, [2]sluice.Result{ok(2, m), ok(4, h)}},
			{0, true, 0, [2]sluice.Result{ok(1, m), ok(3, h)}},
			{0, true, 0, [2]sluice.Result{ok(0, m), ok(2, h)}},
			// Denied by the minute; the hour reports its unchanged state.
			{0, false, 0, [2]sluice.Result{deny(0, m, m), ok(2, h)}},
			{m, true, 1, [2]sluice.Result{ok(4, m), ok(1, h-m)}},
			{m, true, 1, [2]sluice.Result{ok(3, m), ok(0, h-m)}},
			// Denied by the hour; the minute keeps its 3.
			{m, false, 1, [2]sluice.Result{ok(3, m), deny(0, h-m, h-m)}},
		}
		for i, st := range steps {
			e.clock.Set(st.at)
			got, err := e.lim.AllowAll(context.Background(), "client", 1, perMin, perHour)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			for j, l := range []sluice.Limit{perMin, perHour} {
				want := st.want[j]
				want.Limit = l.Capacity()
				if got.Results[j] != want {
					t.Errorf("step %d: %s = %+v, want %+v", i, l, got.Results[j], want)
				}
			}
			if got.Allowed != st.allowed || got.Binding != st.binding || got.Result.RetryAfter != st.want[st.binding].RetryAfter {
				t.Errorf("step %d: overall Allowed=%v Binding=%d RetryAfter=%v, want %v %d %v",
					i, got.Allowed, got.Binding, got.Result.RetryAfter, st.allowed, st.binding, st.want[st.binding].RetryAfter)
			}
		}
		e.clock.Set(m)
		r, err := e.lim.Allow(context.Background(), "client", perMin)
		if err != nil || r != (sluice.Result{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: m}) {
			t.Errorf("after the denied request the minute limit alone gives %+v, %v; want 2 remaining (nothing consumed)", r, err)
		}
	})
	t.Run("all five algorithms", func(t *testing.T) {
		e := newEnv(t, newStore)
		var limits []sluice.Limit
		for _, a := range sluice.Algorithms {
			limits = append(limits, sluice.PerMinute(3).Using(a))
		}
		ctx := context.Background()
		for i := range 3 {
			r, err := e.lim.AllowAll(ctx, "client", 1, limits...)
			if err != nil || !r.Allowed || r.Remaining != 2-i {
				t.Fatalf("request %d: %+v, %v", i, r, err)
			}
		}
		r, err := e.lim.AllowAll(ctx, "client", 1, limits...)
		if err != nil {
			t.Fatal(err)
		}
		// The longest wait binds: sliding_window's 80s (the previous
		// window's 3 weigh 3×(60−e)/60, one more fits at e = 20s).
		wantRetry := []time.Duration{m, 80 * s, m, 20 * s, 20 * s}
		for i, rr := range r.Results {
			if rr.Allowed || rr.RetryAfter != wantRetry[i] {
				t.Errorf("%s: %+v, want denied with RetryAfter %v", limits[i], rr, wantRetry[i])
			}
		}
		if r.Allowed || r.Binding != 1 || r.RetryAfter != 80*s {
			t.Errorf("overall %+v binding %d, want denied by sliding_window after 80s", r.Result, r.Binding)
		}
	})
}

// testInvalid: limits and costs that can never be enforced are errors that
// say what is wrong, never a silent deny.
func testInvalid(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	ctx := context.Background()
	tests := []struct {
		name   string
		limits []sluice.Limit
		cost   int
		target error
		says   string
	}{
		{"zero period", []sluice.Limit{{Algorithm: sluice.FixedWindow, Limit: 5}}, 1, sluice.ErrInvalidLimit, "period must be at least"},
		{"negative limit", []sluice.Limit{sluice.PerSecond(-1)}, 1, sluice.ErrInvalidLimit, "limit must be at least 1"},
		{"zero limit", []sluice.Limit{sluice.PerSecond(0)}, 1, sluice.ErrInvalidLimit, "limit must be at least 1"},
		{"huge limit", []sluice.Limit{sluice.PerSecond(int(min(sluice.MaxLimit+1, math.MaxInt)))}, 1, sluice.ErrInvalidLimit, "limit must be at most"},
		{"huge burst", []sluice.Limit{sluice.PerSecond(500_000).WithBurst(int(min(1<<62+1, math.MaxInt)))}, 1, sluice.ErrInvalidLimit, "burst must be at most"},
		{"burst × interval beyond 2^51", []sluice.Limit{sluice.Per(1, sluice.MaxPeriod).WithBurst(8)}, 1, sluice.ErrInvalidLimit, "exceeds 2^51"},
		{"interval rounded by more than 1%", []sluice.Limit{sluice.PerSecond(400_000)}, 1, sluice.ErrInvalidLimit, "more than 1% slower"},
		{"sliding_log beyond MaxLogLimit", []sluice.Limit{sluice.PerHour(sluice.MaxLogLimit + 1).Using(sluice.SlidingLog)}, 1, sluice.ErrInvalidLimit, "one entry per admitted request"},
		{"sub-millisecond period", []sluice.Limit{sluice.Per(1, time.Microsecond)}, 1, sluice.ErrInvalidLimit, "period must be at least 1ms"},
		{"unknown algorithm", []sluice.Limit{sluice.PerSecond(1).Using("token-bucket")}, 1, sluice.ErrInvalidLimit, `"token-bucket" is not one of`},
		{"burst on fixed window", []sluice.Limit{sluice.PerSecond(5).Using(sluice.FixedWindow).WithBurst(10)}, 1, sluice.ErrInvalidLimit, "burst applies to token_bucket and gcra only"},
		{"negative burst", []sluice.Limit{sluice.PerSecond(5).WithBurst(-1)}, 1, sluice.ErrInvalidLimit, "burst must not be negative"},
		{"bad name", []sluice.Limit{sluice.PerSecond(5).Named("a b")}, 1, sluice.ErrInvalidLimit, "may hold only letters"},
		{"cost above limit", []sluice.Limit{sluice.PerSecond(5).Using(sluice.SlidingLog)}, 6, sluice.ErrInvalidCost, "could never be admitted"},
		{"cost above burst", []sluice.Limit{sluice.PerSecond(5).WithBurst(8)}, 9, sluice.ErrInvalidCost, "exceeds the capacity 8"},
		{"negative cost", []sluice.Limit{sluice.PerSecond(5)}, -1, sluice.ErrInvalidCost, "must not be negative"},
		{"duplicate limit", []sluice.Limit{sluice.PerSecond(5), sluice.PerSecond(5).WithBurst(5)}, 1, sluice.ErrInvalidLimit, "share state"},
		{"no limits", nil, 1, sluice.ErrInvalidLimit, "has no limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.lim.AllowAll(ctx, "client", tt.cost, tt.limits...)
			if !errors.Is(err, tt.target) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("AllowAll(%v, cost %d) error = %v, want %v saying %q", tt.limits, tt.cost, err, tt.target, tt.says)
			}
		})
	}
}

// testReset: Reset gives a spent key its full limit back.
func testReset(t *testing.T, newStore Factory) {
	each(t, func(t *testing.T, a sluice.Algorithm) {
		e := newEnv(t, newStore)
		l := sluice.PerMinute(3).Using(a)
		e.run("client", l, []step{{0, 3, ok(0, resetAfterFull(l))}})
		if err := e.lim.Reset(context.Background(), "client", l); err != nil {
			t.Fatal(err)
		}
		e.run("client", l, []step{{0, 3, ok(0, resetAfterFull(l))}})
	})
}

// resetAfterFull is the ResetAfter of spending a whole limit at Epoch.
func resetAfterFull(l sluice.Limit) time.Duration {
	if l.Algorithm == sluice.SlidingWindow {
		return 2 * l.Period
	}
	return l.Period
}

// testKeys: keys that differ only in braces, escapes or their far end, and
// the empty key, never share state.
func testKeys(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	long := strings.Repeat("k", 300)
	keys := []string{"a{b}", "a%7Bb%7D", "a%257Bb%257D", "a}b", "{", "}", "{}", "", "%H", long + "1", long + "2", "ключ", "a:b", "a"}
	l := sluice.PerHour(1).Using(sluice.FixedWindow)
	for _, k := range keys {
		e.run(k, l, []step{{0, 1, ok(0, h)}})
	}
	for _, k := range keys {
		e.run(k, l, []step{{0, 1, deny(0, h, h)}})
	}
	// Limits with different names or periods do not share state either;
	// limits that differ only in Limit do (their Identity is one): the
	// request spent under 1 per hour stays spent under 2 per hour.
	e.run("a", l.Named("other"), []step{{0, 1, ok(0, h)}})
	e.run("a", sluice.PerMinute(1).Using(sluice.FixedWindow), []step{{0, 1, ok(0, m)}})
	e.run("a", sluice.PerHour(2).Using(sluice.FixedWindow), []step{{0, 1, ok(0, h)}})
}

// testStoreClock: without a clock on the Limiter the store reads its own.
func testStoreClock(t *testing.T, newStore Factory) {
	each(t, func(t *testing.T, a sluice.Algorithm) {
		// A day's window: a boundary falls inside this test once in ~10^7 runs.
		lim := sluice.New(newStore(t, time.Now))
		l := sluice.PerDay(5).Using(a)
		for i := range 5 {
			r, err := lim.Allow(context.Background(), "client", l)
			if err != nil || !r.Allowed || r.Remaining != 4-i || r.ResetAfter <= 0 || r.ResetAfter > 48*h {
				t.Fatalf("request %d: %+v, %v", i, r, err)
			}
		}
		r, err := lim.Allow(context.Background(), "client", l)
		if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > 48*h {
			t.Fatalf("sixth request: %+v, %v; want denied with a RetryAfter within 48h", r, err)
		}
	})
}

// testPrecision: times 60µs apart stay distinct. Microsecond timestamps
// have 16 digits; Lua formats numbers with %.14g (100µs steps), so a store
// that let Lua format a time would merge these two requests into one log
// entry and admit a third.
func testPrecision(t *testing.T, newStore Factory) {
	const us = time.Microsecond
	newEnv(t, newStore).run("client", sluice.PerMinute(2).Using(sluice.SlidingLog), []step{
		{0, 1, ok(1, m)},
		{m - 50*us, 1, ok(0, m)},
		{m + 10*us, 1, ok(0, m)}, // the first request expired at m
		{m + 10*us, 1, deny(0, m, m-60*us)},
	})
}

// testClockBackwards: a clock that steps back (an NTP step, a failover to a
// server whose clock is behind) hands out no fresh quota: 5 per minute spent
// at 60s stay spent at 59.9s, in the previous window, and at 60.1s.
func testClockBackwards(t *testing.T, newStore Factory) {
	each(t, func(t *testing.T, a sluice.Algorithm) {
		e := newEnv(t, newStore)
		l := sluice.PerMinute(5).Using(a)
		admitted := 0
		for _, at := range []time.Duration{m, m - 100*time.Millisecond, m + 100*time.Millisecond} {
			e.clock.Set(at)
			for range 5 {
				r, err := e.lim.Allow(context.Background(), "client", l)
				if err != nil {
					t.Fatal(err)
				}
				if r.Remaining < 0 || r.Remaining > 5 || r.ResetAfter < 0 || r.RetryAfter < 0 {
					t.Errorf("at %v: %+v: values out of range", at, r)
				}
				if r.Allowed {
					admitted++
				}
			}
		}
		if admitted != 5 {
			t.Errorf("%s: %d admitted at 60s, 59.9s and 60.1s, want 5", l, admitted)
		}
	})
}

// testLogBackwards: after a clock steps back, sliding_log still records
// every admitted request (its entries at one instant stay distinct).
func testLogBackwards(t *testing.T, newStore Factory) {
	newEnv(t, newStore).run("client", sluice.PerMinute(3).Using(sluice.SlidingLog), []step{
		{30 * s, 2, ok(1, m)},
		{m, 1, ok(0, m)},
		{105 * s, 1, ok(1, m)}, // the two at 30s expired
		{m, 1, ok(0, 105*s)},   // back to 60s: 60s and 105s are live
		{m, 1, deny(0, 105*s, m)},
	})
}
