package storetest

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// Randomized scenarios step a fake clock. A store that keeps state in a
// server (Redis) expires it by the server's real clock, after the lifetime
// computed on the fake one; so that no state vanishes in real time while the
// fake clock still needs it, these scenarios write only where every
// lifetime is long: costs are at least 1 (token-bucket state then lives at
// least one interval) and no request falls in the last 2s of a fixed window.

// safe moves at out of the last 2s of any window of the limits.
func safe(at time.Duration, limits ...sluice.Limit) time.Duration {
	for _, l := range limits {
		if at%l.Period > l.Period-2*time.Second {
			at += l.Period - at%l.Period
		}
	}
	return at
}

// testLimit returns, for algorithm a, a limit whose token interval is not a
// whole number of microseconds (7 per minute: 8571428.57µs per token).
func testLimit(a sluice.Algorithm) sluice.Limit {
	l := sluice.PerMinute(7).Using(a)
	if a == sluice.TokenBucket || a == sluice.GCRA {
		l = l.WithBurst(3)
	}
	return l
}

// testRetryAfterHonest: after a denial with RetryAfter d, the same request
// is denied 1ms and 1µs before d (with exactly that much left to wait) and
// admitted at d, also when each round of requests comes under a limit
// whose Limit or Burst changed.
func testRetryAfterHonest(t *testing.T, newStore Factory) {
	// check plays rounds, each under one of the limit sets, drawn at
	// random where there are several.
	check := func(t *testing.T, e *env, sets [][]sluice.Limit, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 7))
		ctx := context.Background()
		limits := sets[0]
		take := func(at time.Duration, cost int) sluice.Result {
			e.clock.Set(at)
			r, err := e.lim.AllowAll(ctx, "client", cost, limits...)
			if err != nil {
				t.Fatalf("AllowAll(t=%v, cost %d): %v", at, cost, err)
			}
			return r.Result
		}
		var at time.Duration
		for round := range 25 {
			if len(sets) > 1 {
				limits = sets[rng.IntN(len(sets))]
			}
			at = safe(at, limits...)
			cost := 1 + rng.IntN(3)
			r := take(at, cost)
			for i := 0; r.Allowed; i++ {
				if i > 100 {
					t.Fatalf("round %d: 100 requests of cost %d admitted at one instant", round, cost)
				}
				r = take(at, cost)
			}
			d := r.RetryAfter
			if d <= 0 {
				t.Fatalf("round %d: denied with RetryAfter %v", round, d)
			}
			for _, early := range []time.Duration{time.Millisecond, time.Microsecond} {
				if d <= early {
					continue
				}
				if r := take(at+d-early, cost); r.Allowed || r.RetryAfter != early {
					t.Fatalf("round %d: denied at %v with RetryAfter %v, but at %v (%v early) got %+v, want denied with RetryAfter %v",
						round, at, d, at+d-early, early, r, early)
				}
			}
			if r := take(at+d, cost); !r.Allowed {
				t.Fatalf("round %d: denied at %v with RetryAfter %v, but at %v got %+v", round, at, d, at+d, r)
			}
			at += d + time.Duration(rng.Int64N(int64(90*time.Second)))
		}
	}
	for i, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			check(t, newEnv(t, newStore), [][]sluice.Limit{{testLimit(a)}}, uint64(i))
		})
	}
	t.Run("multi", func(t *testing.T) {
		limits := []sluice.Limit{
			sluice.PerMinute(5).Using(sluice.SlidingWindow),
			testLimit(sluice.TokenBucket),
			sluice.PerHour(10).Using(sluice.FixedWindow),
			sluice.PerMinute(4).Using(sluice.SlidingLog),
		}
		check(t, newEnv(t, newStore), [][]sluice.Limit{limits}, 99)
	})
	for i, a := range sluice.Algorithms {
		// Costs of 1 to 3 stay below every capacity (see
		// testChangingMatchesReference).
		sets := [][]sluice.Limit{{sluice.PerMinute(7)}, {sluice.PerMinute(4)}, {sluice.PerMinute(12)}}
		if a == sluice.TokenBucket || a == sluice.GCRA {
			sets = append(sets, []sluice.Limit{sluice.PerMinute(7).WithBurst(5)}, []sluice.Limit{sluice.PerMinute(5).WithBurst(9)})
		}
		for _, set := range sets {
			set[0] = set[0].Using(a)
		}
		t.Run("changing "+string(a), func(t *testing.T) { check(t, newEnv(t, newStore), sets, uint64(300+i)) })
	}
}

// op is one randomized request.
type op struct {
	at   time.Duration
	key  string
	cost int
}

// ops returns n random requests over three keys, at safe instants.
func ops(seed uint64, n, maxCost int, limits ...sluice.Limit) []op {
	rng := rand.New(rand.NewPCG(seed, 11))
	var at time.Duration
	out := make([]op, n)
	for i := range out {
		switch rng.IntN(6) {
		case 0: // several requests at one instant
		case 1:
			at += time.Duration(rng.Int64N(int64(time.Minute)))
		case 2: // a clock steps back
			at = max(at-time.Duration(rng.Int64N(int64(10*time.Second))), 0)
		default:
			at += time.Duration(rng.Int64N(int64(5 * time.Second)))
		}
		at = safe(at, limits...)
		out[i] = op{at: at, key: []string{"a", "b", "c"}[rng.IntN(3)], cost: 1 + rng.IntN(maxCost)}
	}
	return out
}

// testBucketEqualsGCRA: token_bucket and gcra return identical Results for
// the same requests.
func testBucketEqualsGCRA(t *testing.T, newStore Factory) {
	for _, l := range []sluice.Limit{testLimit(sluice.TokenBucket), sluice.PerMinute(3).WithBurst(8)} {
		e := newEnv(t, newStore)
		tb, gc := l.Using(sluice.TokenBucket), l.Using(sluice.GCRA)
		admitted, denied := 0, 0
		for i, o := range ops(5, 400, 3, l) {
			e.clock.Set(o.at)
			r1, err1 := e.lim.AllowN(context.Background(), o.key, tb, o.cost)
			r2, err2 := e.lim.AllowN(context.Background(), o.key, gc, o.cost)
			if err1 != nil || err2 != nil {
				t.Fatalf("step %d: %v, %v", i, err1, err2)
			}
			if r1 != r2 {
				t.Fatalf("%s, step %d (t=%v key %s cost %d): token_bucket %+v, gcra %+v", l, i, o.at, o.key, o.cost, r1, r2)
			}
			if r1.Allowed {
				admitted++
			} else {
				denied++
			}
		}
		if admitted < 50 || denied < 50 {
			t.Errorf("%s: %d admitted, %d denied: the sequence does not exercise both outcomes", l, admitted, denied)
		}
	}
}

// testMatchesReference: the store returns exactly the Results of the
// reference algorithms (internal/algo, run by the memory store) for long
// random sequences, one limit at a time and several at once, and with
// limits that change between requests.
func testMatchesReference(t *testing.T, newStore Factory) {
	for i, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) { matchReference(t, newStore, fixed(testLimit(a)), uint64(i), 3) })
	}
	t.Run("multi", func(t *testing.T) {
		var limits []sluice.Limit
		for _, a := range sluice.Algorithms {
			limits = append(limits, testLimit(a))
		}
		limits = append(limits, sluice.PerHour(40).Using(sluice.FixedWindow), sluice.PerHour(30).Using(sluice.SlidingWindow))
		matchReference(t, newStore, fixed(limits...), 42, 3)
	})
	t.Run("extreme", func(t *testing.T) {
		// The largest parameters Validate accepts, where Lua's float64
		// numbers come closest to 2^53.
		bucket := sluice.Per(1, sluice.MaxPeriod)
		for bucket.WithBurst(bucket.Capacity()+1).Validate() == nil {
			bucket = bucket.WithBurst(bucket.Capacity() + 1)
		}
		limits := []sluice.Limit{
			bucket, bucket.Using(sluice.GCRA),
			sluice.Per(int(min(sluice.MaxLimit, math.MaxInt)), sluice.MaxPeriod).Using(sluice.FixedWindow),
			sluice.Per(int(min(sluice.MaxLimit, math.MaxInt)), sluice.MaxPeriod).Using(sluice.SlidingWindow),
			sluice.Per(sluice.MaxLogLimit, sluice.MaxPeriod).Using(sluice.SlidingLog),
		}
		for i, l := range limits {
			// Costs up to the bucket's whole capacity.
			t.Run(l.String(), func(t *testing.T) { matchReference(t, newStore, fixed(l), uint64(100+i), bucket.Capacity()) })
		}
		t.Run("all", func(t *testing.T) { matchReference(t, newStore, fixed(limits...), 99, bucket.Capacity()) })
	})
	t.Run("changing", func(t *testing.T) { testChangingMatchesReference(t, newStore) })
}

// fixed returns the variants of limits that never change.
func fixed(limits ...sluice.Limit) [][]sluice.Limit {
	v := make([][]sluice.Limit, len(limits))
	for i, l := range limits {
		v[i] = []sluice.Limit{l}
	}
	return v
}

// matchReference compares the store with the reference over random
// requests of costs 1 to maxCost. Each request is limited by one limit of
// each variants[i], drawn at random where there are several (limits of one
// Identity whose Limit or Burst differ, as a reloaded policy changes them).
func matchReference(t *testing.T, newStore Factory, variants [][]sluice.Limit, seed uint64, maxCost int) {
	e := newEnv(t, newStore)
	ref := sluice.New(memory.New(memory.WithClock(e.clock.Now)), sluice.WithClock(e.clock.Now))
	rng := rand.New(rand.NewPCG(seed, 13))
	limits := make([]sluice.Limit, len(variants))
	for i := range variants {
		limits[i] = variants[i][0] // one Period per variant: what safe needs
	}
	for i, o := range ops(seed, 300, maxCost, limits...) {
		for j, v := range variants {
			if len(v) > 1 {
				limits[j] = v[rng.IntN(len(v))]
			}
		}
		e.clock.Set(o.at)
		got, err := e.lim.AllowAll(context.Background(), o.key, o.cost, limits...)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want, err := ref.AllowAll(context.Background(), o.key, o.cost, limits...)
		if err != nil {
			t.Fatalf("step %d: reference: %v", i, err)
		}
		for j := range limits {
			if got.Results[j] != want.Results[j] {
				t.Fatalf("step %d (t=%v key %s cost %d): %s = %+v, reference %+v", i, o.at, o.key, o.cost, limits[j], got.Results[j], want.Results[j])
			}
		}
	}
}

// testConcurrency: many goroutines spending one key at one instant admit
// exactly the limit, for every algorithm, and a multi-limit decision stays
// all or nothing under contention.
func testConcurrency(t *testing.T, newStore Factory) {
	each(t, func(t *testing.T, a sluice.Algorithm) {
		clock := NewClock()
		lim := sluice.New(newStore(t, clock.Now), sluice.WithClock(clock.Now))
		// A day's period: Redis expires keys on its own clock, so at 500 a
		// minute the frozen clock's first gcra or token_bucket admit would
		// live 120 ms of real time, which a slow run outlasts.
		l := sluice.PerDay(500).Using(a)
		if got := Hammer(t, []*sluice.Limiter{lim}, "hot", 64, 16, l); got != 500 {
			t.Errorf("%s: 64 goroutines × 16 requests admitted %d, want exactly 500", l, got)
		}
	})
	t.Run("multi", func(t *testing.T) {
		clock := NewClock()
		lim := sluice.New(newStore(t, clock.Now), sluice.WithClock(clock.Now))
		HammerMulti(t, []*sluice.Limiter{lim}, 64, 16)
	})
}

// HammerMulti hammers one key with two limits at once, 500 per minute
// (fixed_window) and 300 per minute (sliding_log), from workers goroutines
// per limiter, and fails t unless exactly 300 are admitted and the requests
// the second limit denied consumed nothing from the first.
func HammerMulti(t testing.TB, lims []*sluice.Limiter, workers, attempts int) {
	t.Helper()
	loose := sluice.PerMinute(500).Using(sluice.FixedWindow)
	tight := sluice.PerMinute(300).Using(sluice.SlidingLog)
	if got := Hammer(t, lims, "hot-multi", workers, attempts, loose, tight); got != 300 {
		t.Errorf("%s AND %s: admitted %d, want exactly 300", loose, tight, got)
	}
	r, err := lims[0].AllowN(context.Background(), "hot-multi", loose, 0)
	if err != nil || r.Remaining != 200 {
		t.Errorf("%s after the hammer: %+v, %v; want 200 remaining (denied requests consume nothing)", loose, r, err)
	}
}

// Hammer sends attempts requests for key under limits (all or nothing)
// from each of workers goroutines per limiter, all released at once, and
// returns how many were admitted. Any error fails t.
func Hammer(t testing.TB, lims []*sluice.Limiter, key string, workers, attempts int, limits ...sluice.Limit) int {
	t.Helper()
	start := make(chan struct{})
	results := make(chan int)
	errs := make(chan error, len(lims)*workers)
	for _, lim := range lims {
		for range workers {
			go func() {
				<-start
				n := 0
				for range attempts {
					r, err := lim.AllowAll(context.Background(), key, 1, limits...)
					if err != nil {
						errs <- err
						break
					}
					if r.Allowed {
						n++
					}
				}
				results <- n
			}()
		}
	}
	close(start)
	total := 0
	for range len(lims) * workers {
		total += <-results
	}
	close(errs)
	for err := range errs {
		t.Fatalf("Hammer: %v", err)
	}
	return total
}

// HammerSettle reserves reserve units of key under l attempts times from
// each of workers goroutines per limiter, all released at once, settles
// each reservation at an actual cost from 0 to 2×reserve−1 (refunds and
// charges alike), and returns the sum of the actual costs: what the key
// must hold consumed afterwards. Every reservation must be admitted (the
// limit is above any sum they reach); a denial or any error fails t.
func HammerSettle(t testing.TB, lims []*sluice.Limiter, key string, l sluice.Limit, workers, attempts, reserve int) int {
	t.Helper()
	ctx := context.Background()
	start := make(chan struct{})
	var (
		wg      sync.WaitGroup
		settled atomic.Int64
		errOnce sync.Once
		first   error
	)
	fail := func(err error) { errOnce.Do(func() { first = err }) }
	for r, lim := range lims {
		for g := range workers {
			wg.Go(func() {
				<-start
				for i := range attempts {
					res, err := lim.Reserve(ctx, key, l, reserve)
					if err != nil {
						fail(err)
						return
					}
					if !res.Allowed {
						fail(errors.New("a reservation was denied; the limit should admit them all"))
						return
					}
					actual := (r*7 + g*5 + i*3) % (2 * reserve)
					if _, err := res.Settle(ctx, actual); err != nil {
						fail(err)
						return
					}
					settled.Add(int64(actual))
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if first != nil {
		t.Fatalf("HammerSettle: %v", first)
	}
	return int(settled.Load())
}
