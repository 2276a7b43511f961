package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/lease"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// spend is a request of cost for key at Epoch+at, or a take of that cost
// on a plain store.
type spend struct {
	key  string
	at   time.Duration
	cost int
}

// newGiving returns a lease Store over a counting memory store, which is
// a Settler: the Store gives back. keep makes it keep its rests instead
// (the control).
func newGiving(t *testing.T, keep bool, opts ...lease.Option) (*lease.Store, *storetest.Counting) {
	t.Helper()
	c := &storetest.Counting{Store: memory.New()}
	s, err := lease.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if keep {
		lease.KeepRests(s)
	}
	return s, c
}

// checkBacking fails t unless the backing store holds each key of want
// under l as a plain store that took want does, read at Epoch+at.
func checkBacking(t *testing.T, backing sluice.Store, l sluice.Limit, at time.Duration, want []spend) {
	t.Helper()
	twin := memory.New()
	keys := map[string]bool{}
	for _, w := range want {
		if w.cost > 0 {
			take(t, twin, one(w.key, l, w.cost, storetest.Epoch.Add(w.at)))
		}
		keys[w.key] = true
	}
	now := storetest.Epoch.Add(at)
	for k := range keys {
		got, exp := take(t, backing, one(k, l, 0, now)), take(t, twin, one(k, l, 0, now))
		if got != exp {
			t.Errorf("%s: key %q: the backing store holds %+v, want %+v", l, k, got, exp)
		}
	}
}

// A lease over a Settler gives back what it did not spend when it is
// replaced, found ended before its state (MaxAge, a sliding window's next
// window) or evicted, so the backing store holds what was spent and the
// new blocks; one that ended with its state has nothing to give back to
// and makes no call. The control keeps its rests and is caught: its
// backing store holds the whole blocks.
func TestGiveBack(t *testing.T) {
	const s = time.Second
	fixed := sluice.PerMinute(100).Using(sluice.FixedWindow)
	for _, tc := range []struct {
		name    string
		limit   sluice.Limit
		opts    []lease.Option
		spends  []spend // through the lease Store, each admitted
		given   []spend // what the backing store then holds
		kept    []spend // and without give-backs
		refunds int64   // give-back calls
	}{
		// Cost 4 of 10: 6, 2, then 2 given back and a new block.
		{name: "replaced", limit: fixed,
			spends:  []spend{{"k", 10 * s, 4}, {"k", 10 * s, 4}, {"k", 10 * s, 4}},
			given:   []spend{{"k", 10 * s, 8}, {"k", 10 * s, 10}},
			kept:    []spend{{"k", 10 * s, 10}, {"k", 10 * s, 10}},
			refunds: 1},
		{name: "ended by MaxAge", limit: fixed, opts: []lease.Option{lease.MaxAge(s)},
			spends:  []spend{{"k", 10 * s, 3}, {"k", 12 * s, 1}},
			given:   []spend{{"k", 10 * s, 3}, {"k", 12 * s, 10}},
			kept:    []spend{{"k", 10 * s, 10}, {"k", 12 * s, 10}},
			refunds: 1},
		{name: "sliding_log ended by MaxAge", limit: fixed.Using(sluice.SlidingLog), opts: []lease.Option{lease.MaxAge(10 * s)},
			spends:  []spend{{"k", 0, 3}, {"k", 20 * s, 1}},
			given:   []spend{{"k", 0, 3}, {"k", 20 * s, 10}},
			kept:    []spend{{"k", 0, 10}, {"k", 20 * s, 10}},
			refunds: 1},
		// 7 tokens given back 2s after the block: 4s of debt is left, all
		// given back (the bucket would have been full by then).
		{name: "gcra ended by MaxAge", limit: fixed.Using(sluice.GCRA), opts: []lease.Option{lease.MaxAge(s)},
			spends:  []spend{{"k", 0, 3}, {"k", 2 * s, 1}},
			given:   []spend{{"k", 0, 3}, {"k", 2 * s, 10}},
			kept:    []spend{{"k", 0, 10}, {"k", 2 * s, 10}},
			refunds: 1},
		// The lease ends with the window at 60s; its units still weigh in
		// the window after.
		{name: "sliding_window, the next window", limit: fixed.Using(sluice.SlidingWindow),
			spends:  []spend{{"k", 50 * s, 3}, {"k", 70 * s, 1}},
			given:   []spend{{"k", 50 * s, 3}, {"k", 70 * s, 10}},
			kept:    []spend{{"k", 50 * s, 10}, {"k", 70 * s, 10}},
			refunds: 1},
		{name: "fixed_window, ended with its window", limit: fixed,
			spends: []spend{{"k", 50 * s, 3}, {"k", 70 * s, 1}},
			given:  []spend{{"k", 50 * s, 10}, {"k", 70 * s, 10}},
			kept:   []spend{{"k", 50 * s, 10}, {"k", 70 * s, 10}}},
		// 10 tokens of 600ms: full again at 6s.
		{name: "token_bucket, full again", limit: sluice.PerMinute(100),
			spends: []spend{{"k", 0, 3}, {"k", 7 * s, 1}},
			given:  []spend{{"k", 0, 10}, {"k", 7 * s, 10}},
			kept:   []spend{{"k", 0, 10}, {"k", 7 * s, 10}}},
		// One lease fits: b's evicts a's, which gives back 7.
		{name: "evicted", limit: fixed, opts: []lease.Option{lease.MaxLeases(1)},
			spends:  []spend{{"a", 10 * s, 3}, {"b", 10 * s, 1}},
			given:   []spend{{"a", 10 * s, 3}, {"b", 10 * s, 10}},
			kept:    []spend{{"a", 10 * s, 10}, {"b", 10 * s, 10}},
			refunds: 1},
	} {
		for _, control := range []bool{false, true} {
			name := tc.name
			if control {
				name += "/control: rests kept"
			}
			t.Run(name, func(t *testing.T) {
				s, c := newGiving(t, control, append(tc.opts, lease.Block(10))...)
				for i, sp := range tc.spends {
					if r := take(t, s, one(sp.key, tc.limit, sp.cost, storetest.Epoch.Add(sp.at))); !r.Allowed {
						t.Fatalf("request %d: %+v, want it admitted", i, r)
					}
				}
				want, refunds := tc.given, tc.refunds
				if control {
					want, refunds = tc.kept, 0
				}
				checkBacking(t, c.Store, tc.limit, tc.spends[len(tc.spends)-1].at, want)
				if n := c.Refunds(); n != refunds {
					t.Errorf("%d give-back calls, want %d", n, refunds)
				}
			})
		}
	}
}

// Release gives every lease's rest back, on the caller's clock and on the
// store's, one call per clock, and drops the leases; a second Release has
// nothing to give; the Store leases again afterwards. Over a backing store
// that is no Settler it drops the leases only, as does the control.
func TestRelease(t *testing.T) {
	ctx := context.Background()
	now := storetest.Epoch.Add(10 * time.Second)
	fixed := sluice.PerMinute(100).Using(sluice.FixedWindow)
	gcra := sluice.PerMinute(100).Using(sluice.GCRA)
	day := sluice.PerDay(1000).Using(sluice.GCRA) // the store's clock: no unit refills in a test
	for _, tc := range []struct {
		name    string
		keep    bool
		hidden  bool // the backing store is no Settler
		spent   int  // the backing store holds spent per key after Release
		refunds int64
	}{
		{name: "gives back", spent: 3, refunds: 2},
		{name: "control: rests kept", keep: true, spent: 10},
		{name: "no Settler", hidden: true, spent: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &storetest.Counting{Store: memory.New()}
			var backing sluice.Store = c
			if tc.hidden {
				backing = storetest.TakeOnly(c)
			}
			s, err := lease.New(backing, lease.Block(10))
			if err != nil {
				t.Fatal(err)
			}
			if tc.keep {
				lease.KeepRests(s)
			}
			reqs := []sluice.Request{one("a", fixed, 3, now), one("b", gcra, 3, now), one("c", day, 3, time.Time{})}
			for _, req := range reqs {
				take(t, s, req)
			}
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if s.Len() != 0 {
				t.Errorf("%d leases after Release, want none", s.Len())
			}
			for _, req := range reqs {
				req.Parts[0].Cost = 0
				p := req.Parts[0]
				if r := take(t, c.Store, req); r.Remaining != p.Limits[0].Capacity()-tc.spent {
					t.Errorf("%s: the backing store has %d left after Release, want %d", p.Limits[0], r.Remaining, p.Limits[0].Capacity()-tc.spent)
				}
			}
			if n := c.Refunds(); n != tc.refunds {
				t.Errorf("Release made %d give-back calls, want %d", n, tc.refunds)
			}
			if err := s.Release(ctx); err != nil || c.Refunds() != tc.refunds {
				t.Errorf("a second Release: %v, %d calls in all; want nothing to give", err, c.Refunds())
			}
			if r := take(t, s, one("a", fixed, 1, now)); !r.Allowed || r.Remaining != 9 || s.Len() != 1 {
				t.Errorf("after Release: %+v, %d leases; want a new block", r, s.Len())
			}
		})
	}
}
