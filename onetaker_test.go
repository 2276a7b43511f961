package sluice_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// takeOnly hides its store's TakeOne: a Limiter over it decides Allow and
// AllowN with Take, as over a store that is no sluice.OneTaker (it
// forwards the sluice.Store methods alone).
type takeOnly struct{ sluice.Store }

// TestOneTakerAgrees: a Limiter over the memory store, which asks its
// TakeOne for Allow and AllowN, answers exactly as one that asks its Take,
// request for request, on random traffic (time moving on by random steps,
// three keys, costs 0 to 3, some of them invalid, resets), for every
// algorithm and a named limit, with and without the deny cache.
func TestOneTakerAgrees(t *testing.T) {
	limits := append([]sluice.Limit{sluice.PerSecond(4).Named("search")}, denyLimits...)
	for _, l := range limits {
		for _, cache := range []bool{false, true} {
			name := l.String()
			if cache {
				name += "/deny_cache"
			}
			t.Run(name, func(t *testing.T) {
				now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				clock := func() time.Time { return now }
				opts := []sluice.Option{sluice.WithClock(clock)}
				if cache {
					opts = append(opts, sluice.WithDenyCache(0))
				}
				one := sluice.New(memory.New(), opts...)
				take := sluice.New(takeOnly{memory.New()}, opts...)
				rng := rand.New(rand.NewPCG(7, uint64(len(name))))
				ctx := context.Background()
				for i := range 5000 {
					now = now.Add(time.Duration(rng.IntN(300_000)) * time.Microsecond)
					key := []string{"a", "b", "c"}[rng.IntN(3)]
					if rng.IntN(200) == 0 {
						if err := one.Reset(ctx, key, l); err != nil {
							t.Fatal(err)
						}
						if err := take.Reset(ctx, key, l); err != nil {
							t.Fatal(err)
						}
						continue
					}
					cost := rng.IntN(4)
					got, gerr := one.AllowN(ctx, key, l, cost)
					want, werr := take.AllowN(ctx, key, l, cost)
					if got != want || (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
						t.Fatalf("request %d (%s, cost %d): TakeOne %+v, %v; Take %+v, %v", i, key, cost, got, gerr, want, werr)
					}
				}
			})
		}
	}
}

// downOne is a store that is down, and a sluice.OneTaker: every call
// fails.
type downOne struct{ downStore }

func (downOne) TakeOne(context.Context, string, sluice.Limit, int, time.Time) (sluice.Result, error) {
	return sluice.Result{}, errors.New("connection refused")
}

// TestOneTakerFails: when a OneTaker fails, each error policy answers
// Allow as it answers over a store that is no OneTaker.
func TestOneTakerFails(t *testing.T) {
	l := sluice.PerHour(4)
	for _, p := range []sluice.ErrorPolicy{sluice.ReturnErrors, sluice.AllowOnError, sluice.DenyOnError} {
		one := sluice.New(downOne{}, sluice.WithErrorPolicy(p))
		take := sluice.New(downStore{}, sluice.WithErrorPolicy(p))
		got, gerr := one.Allow(context.Background(), "k", l)
		want, werr := take.Allow(context.Background(), "k", l)
		if got != want || (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Errorf("%s: over a failing OneTaker %+v, %v; over a failing store %+v, %v", p, got, gerr, want, werr)
		}
	}
	// The local fallback decides, with the replicas' share.
	replicas := func() int { return 2 }
	lim := sluice.New(downOne{}, sluice.WithErrorPolicy(sluice.LocalOnError(memory.New())), sluice.WithReplicas(replicas))
	admitted := 0
	for range 10 {
		r, err := lim.Allow(context.Background(), "k", l)
		if err != nil || r.Degraded != sluice.DegradedLocal {
			t.Fatalf("local fallback under a failing OneTaker: %+v, %v", r, err)
		}
		if r.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("the local fallback admitted %d of a limit of 4 on 2 replicas, want 2", admitted)
	}
}
