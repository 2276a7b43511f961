//go:build integration

package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/storetest"
)

// settleReserve is what each reservation of hammerSettle reserves; its
// actual costs run from 0 to 2×settleReserve−1, refunds and charges.
const settleReserve = 4

// TestSettleExactUnderConcurrency: 8 replicas × 32 goroutines each
// reserve 4 units of one key and settle at what their work cost (0 to 7:
// refunds, nothing, charges), at a frozen clock under every algorithm;
// what the key holds consumed at the end is exactly the sum of the
// actual costs. TestHarnessCatchesRacySettle is its control.
func TestSettleExactUnderConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	frozen := storetest.NewClock()
	lims := limitersOver(serverStores(t, srv.Addr, replicas), same(sluice.WithClock(frozen.Now)))
	for _, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			l := sluice.PerDay(10_000).Using(a)
			consumed, want := hammerSettle(t, lims, "settle-"+string(a), l)
			t.Logf("%s: %d replicas × %d goroutines settled %d units; the key holds %d consumed", l, len(lims), goroutines, want, consumed)
			if consumed != want {
				t.Errorf("%s holds %d consumed after settles that cost %d in all", l, consumed, want)
			}
		})
	}
}

// TestHarnessCatchesRacySettle: the same harness over a store whose
// refunds and charges read the state, settle it in the client and write
// it back (racyStore's settle) finds the key's count off the sum of the
// actual costs: updates were lost.
func TestHarnessCatchesRacySettle(t *testing.T) {
	srv := redistest.Start(t)
	frozen := storetest.NewClock()
	var lims []*sluice.Limiter
	var racy []racyStore
	for range replicas {
		r := newRacyStore(newRueidis(t, srv.Addr))
		racy = append(racy, r)
		lims = append(lims, sluice.New(r, sluice.WithClock(frozen.Now)))
	}
	l := sluice.PerDay(10_000).Using(sluice.FixedWindow)
	consumed, want := hammerSettle(t, lims, "racy-settle", l)
	var lost int64
	for _, r := range racy {
		lost += r.lost.Load()
	}
	t.Logf("GET-then-SET settles: %d units settled, %d consumed, %d writes lost", want, consumed, lost)
	if consumed == want {
		t.Errorf("the racy store holds %d consumed, the sum of the settles; the harness should have caught lost updates", consumed)
	}
}

// hammerSettle runs storetest.HammerSettle of settleReserve and returns
// what the key holds consumed afterwards (capacity − remaining) and the
// sum of the actual costs of the settles.
func hammerSettle(t *testing.T, lims []*sluice.Limiter, key string, l sluice.Limit) (consumed, want int) {
	t.Helper()
	want = storetest.HammerSettle(t, lims, key, l, goroutines, attempts, settleReserve)
	after, err := lims[0].AllowN(context.Background(), key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l.Capacity() - after.Remaining, want
}

// TakeAt lets racyStore settle: its Take, decided at the
// request's instant.
func (r racyStore) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	rs, err := r.Take(ctx, req)
	if err != nil {
		return sluice.Taken{}, err
	}
	return sluice.Taken{Results: rs, At: []time.Time{req.Now}}, nil
}

// Refund reads the state, gives back in the client (internal/algo's
// Refund, the rule every store follows) and writes it back.
func (r racyStore) Refund(ctx context.Context, req sluice.Request, t sluice.Taken) ([]sluice.Result, error) {
	taken, reset := algo.Unknown, int64(0)
	if t.At != nil {
		taken, reset = t.At[0].UnixMicro(), t.Results[0].ResetAfter.Microseconds()
	}
	return r.settle(ctx, req, func(sp *algo.Spec, st algo.State, now, cost int64) (algo.State, int64, bool) {
		return sp.Refund(st, now, taken, reset, cost)
	})
}

// Charge reads the state, charges in the client and writes it back.
func (r racyStore) Charge(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	return r.settle(ctx, req, func(sp *algo.Spec, st algo.State, now, cost int64) (algo.State, int64, bool) {
		next, ttl := sp.Charge(st, now, cost)
		return next, ttl, true
	})
}

// settle runs f on the state of req's one part and limit between a read
// and a write.
func (r racyStore) settle(ctx context.Context, req sluice.Request, f func(sp *algo.Spec, st algo.State, now, cost int64) (algo.State, int64, bool)) ([]sluice.Result, error) {
	if len(req.Parts) != 1 || len(req.Parts[0].Limits) != 1 {
		return nil, errors.New("racyStore settles one part of one limit")
	}
	p, l := req.Parts[0], req.Parts[0].Limits[0]
	key := racyKey(p, l)
	st, raw, err := r.read(ctx, key)
	if err != nil {
		return nil, err
	}
	now := req.Now.UnixMicro()
	sp := algo.SpecOf(l)
	if next, ttl, ok := f(&sp, st, now, int64(p.Cost)); ok {
		if err := r.write(ctx, key, raw, next, ttl); err != nil {
			return nil, err
		}
		st = next
	}
	res, _, _ := algo.Check(l, st, now, 0)
	return []sluice.Result{res}, nil
}
