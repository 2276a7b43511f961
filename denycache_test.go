package sluice_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// denyLimits has one limit of every algorithm, small enough to deny often.
var denyLimits = []sluice.Limit{
	{Algorithm: sluice.FixedWindow, Limit: 3, Period: time.Second},
	{Algorithm: sluice.SlidingWindow, Limit: 3, Period: time.Second},
	{Algorithm: sluice.SlidingLog, Limit: 3, Period: time.Second},
	{Algorithm: sluice.TokenBucket, Limit: 3, Period: time.Second, Burst: 2},
	{Algorithm: sluice.GCRA, Limit: 3, Period: time.Second, Burst: 2},
}

// TestDenyCacheExact: a Limiter with the deny cache answers every request
// exactly as one without it, request for request, on random traffic (time
// moving on by random steps, three keys, costs 0 to 2, resets), for every
// algorithm; and the store sees far fewer decisions.
func TestDenyCacheExact(t *testing.T) {
	for _, l := range denyLimits {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			plain := sluice.New(memory.New(), sluice.WithClock(clock))
			counted := &storetest.Counting{Store: memory.New()}
			cached := sluice.New(counted, sluice.WithClock(clock), sluice.WithDenyCache(0))
			rng := rand.New(rand.NewPCG(1, uint64(len(l.Algorithm))))
			ctx := context.Background()
			requests := 0
			for i := range 20000 {
				now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
				key := []string{"a", "b", "c"}[rng.IntN(3)]
				if rng.IntN(500) == 0 {
					if err := plain.Reset(ctx, key, l); err != nil {
						t.Fatal(err)
					}
					if err := cached.Reset(ctx, key, l); err != nil {
						t.Fatal(err)
					}
					continue
				}
				cost := 1
				if r := rng.IntN(10); r == 0 {
					cost = 0
				} else if r == 1 {
					cost = 2
				}
				want, err := plain.AllowN(ctx, key, l, cost)
				if err != nil {
					t.Fatal(err)
				}
				got, err := cached.AllowN(ctx, key, l, cost)
				if err != nil {
					t.Fatal(err)
				}
				requests++
				if got != want {
					t.Fatalf("request %d (%s, cost %d, at %s): with the cache %+v, without %+v", i, key, cost, now.Format("15:04:05.000"), got, want)
				}
			}
			if n := counted.Takes(); n > int64(requests)*3/4 {
				t.Errorf("the store decided %d of %d requests: the cache answered few", n, requests)
			}
			t.Logf("%s: the store decided %d of %d requests", l.Algorithm, counted.Takes(), requests)
		})
	}
}

// TestDenyCacheReplicas: a replica with the deny cache never denies a
// request that the store would admit at that instant, while other
// replicas (without it) spend from the same store: every denial it
// answers, a replica without the cache asked at once denies too.
func TestDenyCacheReplicas(t *testing.T) {
	for _, l := range denyLimits {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			shared := memory.New()
			cached := sluice.New(shared, sluice.WithClock(clock), sluice.WithDenyCache(0))
			other := sluice.New(shared, sluice.WithClock(clock))
			truth := sluice.New(shared, sluice.WithClock(clock))
			rng := rand.New(rand.NewPCG(2, uint64(len(l.Algorithm))))
			ctx := context.Background()
			denials := 0
			for i := range 20000 {
				now = now.Add(time.Duration(rng.IntN(30)) * time.Millisecond)
				if rng.IntN(2) == 0 {
					if _, err := other.Allow(ctx, "k", l); err != nil {
						t.Fatal(err)
					}
					continue
				}
				r, err := cached.Allow(ctx, "k", l)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					continue
				}
				denials++
				// The same request, asked now of the store: a denial spends
				// nothing, an admission is one more replica's spending.
				tr, err := truth.Allow(ctx, "k", l)
				if err != nil {
					t.Fatal(err)
				}
				if tr.Allowed {
					t.Fatalf("request %d at %s: the cached replica denied %+v, the store admits it", i, now.Format("15:04:05.000"), r)
				}
				if r.RetryAfter > tr.RetryAfter {
					t.Fatalf("request %d: RetryAfter %s from the cache, %s from the store: the cache must not ask for longer", i, r.RetryAfter, tr.RetryAfter)
				}
			}
			if denials == 0 {
				t.Fatal("no denial: the test proves nothing")
			}
		})
	}
}

// TestDenyCacheReset: Limiter.Reset forgets a key's cached denials, and
// a changed limit is asked of the store afresh.
func TestDenyCacheReset(t *testing.T) {
	ctx := context.Background()
	lim := sluice.New(memory.New(), sluice.WithDenyCache(0))
	l := sluice.PerHour(1)
	lim.Allow(ctx, "k", l)
	if r, _ := lim.Allow(ctx, "k", l); r.Allowed {
		t.Fatal("second request of a limit of 1 admitted")
	}
	if err := lim.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	if r, _ := lim.Allow(ctx, "k", l); !r.Allowed {
		t.Error("denied after Reset: the cached denial was kept")
	}
	if r, _ := lim.Allow(ctx, "k", sluice.PerHour(5)); !r.Allowed {
		t.Error("a raised limit was answered from the cached denial of the old one")
	}
}
