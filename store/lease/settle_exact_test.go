//go:build integration

package lease_test

import (
	"context"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/lease"
	"github.com/sluice-go/sluice/store/storetest"
)

// reserveCost is what each reservation of TestSettleExact reserves; its
// actual costs run from 0 to 2×reserveCost−1: refunds, nothing, charges.
const reserveCost = 4

// exactRun is a run of TestSettleExact: an algorithm, at a frozen clock
// or on the stores' own.
type exactRun struct {
	a      sluice.Algorithm
	frozen bool
}

// exactRuns are every algorithm at a frozen clock, where every block is
// taken at one instant, and sliding_log on the stores' own clocks, where
// each block has an instant of its own and a refund removes log entries
// of its take's instant only: a refund given to another block than the
// one that consumed its units would find too few. (A window's count is
// exact on any clock too, but a day's window may end during a test, and a
// bucket refills.)
var exactRuns = append(func() (runs []exactRun) {
	for _, a := range sluice.Algorithms {
		runs = append(runs, exactRun{a, true})
	}
	return runs
}(), exactRun{sluice.SlidingLog, false})

// TestSettleExact: 4 replicas × 8 goroutines, each replica a Settling
// store over its own client of one real redis-server (and over one memory
// store), reserve 4 units of one key and settle at what their work cost
// (0 to 7), most of them answered and settled from leases (exactRuns says
// under which algorithms and clocks). Once each replica has released its
// leases, the key holds consumed exactly the sum of the actual costs. The
// control's leases keep their rests (lease.KeepRests): the same count
// finds the key holding more than the work cost.
func TestSettleExact(t *testing.T) {
	for _, be := range backends {
		for _, run := range exactRuns {
			for _, control := range []bool{false, true} {
				a := run.a
				name := be.name + "/" + string(a)
				if !run.frozen {
					name += "/store clock"
				}
				if control {
					name += "/control: rests kept"
				}
				t.Run(name, func(t *testing.T) {
					var opts []sluice.Option
					if run.frozen {
						opts = append(opts, sluice.WithClock(storetest.NewClock().Now))
					}
					var lims []*sluice.Limiter
					var stores []*lease.Store
					var backs []*storetest.Counting
					for _, b := range be.new(t, replicas) {
						c := &storetest.Counting{Store: b}
						s, err := lease.New(c, lease.Block(10*reserveCost))
						if err != nil {
							t.Fatal(err)
						}
						if control {
							lease.KeepRests(s)
						}
						backs, stores = append(backs, c), append(stores, s)
						lims = append(lims, sluice.New(s, opts...))
					}
					l := sluice.PerDay(10_000).Using(a)
					key := "settle-" + name
					const attempts = 40
					want := storetest.HammerSettle(t, lims, key, l, workers, attempts, reserveCost)
					release(t, stores)
					// Each replica leases again and keeps a rest of 10×4−1,
					// which only a give-back returns.
					for _, lim := range lims {
						if r, err := lim.Allow(context.Background(), key, l); err != nil || !r.Allowed {
							t.Fatalf("Allow after Release: %+v, %v", r, err)
						}
						want++
					}
					release(t, stores)
					r, err := lims[0].AllowN(context.Background(), key, l, 0) // cost 0: the backing store's
					if err != nil {
						t.Fatal(err)
					}
					consumed := l.Capacity() - r.Remaining
					var takes int64
					for _, c := range backs {
						takes += c.Takes()
					}
					reservations := replicas * workers * attempts
					t.Logf("%s: %d reservations settled %d units with %d backing takes; the key holds %d consumed", l, reservations, want, takes, consumed)
					if control {
						if consumed <= want {
							t.Errorf("leases that keep their rests left %d consumed for %d settled: the harness did not catch them", consumed, want)
						}
						return
					}
					if consumed != want {
						t.Errorf("%s holds %d consumed after settles that cost %d in all", l, consumed, want)
					}
					if takes > int64(reservations)/2 {
						t.Errorf("%d backing takes for %d reservations: the leases answered too few", takes, reservations)
					}
				})
			}
		}
	}
}

// release releases every store's leases, failing t on an error.
func release(t *testing.T, stores []*lease.Store) {
	t.Helper()
	for _, s := range stores {
		if err := s.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
