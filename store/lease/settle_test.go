package lease_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/lease"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

var _ sluice.Store = (*lease.Store)(nil)

// A Store over a backing store that cannot settle (its TakeAt fails with
// errors.ErrUnsupported) still leases; Reserve over it fails with that
// error, and a decision is not failed for it.
func TestLeaseOverTakeOnly(t *testing.T) {
	s, err := lease.New(storetest.TakeOnly(memory.New()))
	if err != nil {
		t.Fatal(err)
	}
	lim := sluice.New(s)
	ctx := context.Background()
	if r, err := lim.Allow(ctx, "k", sluice.PerMinute(100)); err != nil || !r.Allowed {
		t.Fatalf("Allow over a take-only backing store: %+v, %v", r, err)
	}
	if _, err := lim.Reserve(ctx, "k", sluice.PerMinute(100), 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reserve over a take-only backing store: %v, want errors.ErrUnsupported", err)
	}
	if _, err := lease.New(nil); err == nil || !strings.Contains(err.Error(), "backing store is nil") {
		t.Errorf("New(nil): %v, want its error", err)
	}
	if _, err := lease.New(memory.New(), lease.Block(0)); err == nil || !strings.Contains(err.Error(), "Block must be at least 1") {
		t.Errorf("New with Block(0): %v, want its error", err)
	}
}

// An operation of TestSettleThroughLease.
type settleOp int

const (
	reserve settleOp = iota // Limiter.Reserve of n
	settle                  // Settle at n of the earliest reservation not settled
	allow                   // Limiter.AllowN of n
	refund                  // Limiter.Refund of n
)

// step of TestSettleThroughLease: op at Epoch+at, and the Result's
// Allowed and Remaining it must answer.
type settleStep struct {
	op        settleOp
	at        time.Duration
	n         int
	allowed   bool
	remaining int
}

// Reservations answered from a lease settle in it while it runs, with no
// backing-store call: a refund goes back into the lease, a charge is
// spent from it. A refund after the lease was replaced or ended goes to
// the backing store, to the block's take (nothing, once its window is
// over); a charge beyond the lease goes to the backing store and leaves
// the lease spent, so that the debt denies the next request. Requests
// that are not leased, and refunds without a take, are the backing
// store's.
func TestSettleThroughLease(t *testing.T) {
	const s = time.Second
	fixed := sluice.PerMinute(100).Using(sluice.FixedWindow)
	for _, tc := range []struct {
		name                    string
		limit                   sluice.Limit
		steps                   []settleStep
		takes, refunds, charges int64 // backing-store calls
		backing                 int   // what it has left at the last step
	}{
		{name: "refund into the lease", limit: fixed, steps: []settleStep{
			{reserve, 10 * s, 8, true, 2},
			{settle, 10 * s, 3, true, 7}, // the lease's 2 + 5
			{allow, 10 * s, 7, true, 0},
		}, takes: 1, backing: 90},
		{name: "refund into the lease, gcra", limit: fixed.Using(sluice.GCRA), steps: []settleStep{
			{reserve, 10 * s, 8, true, 2},
			{settle, 11 * s, 3, true, 7},
			{allow, 11 * s, 7, true, 0},
		}, takes: 1, backing: 91}, // a token back in 1s
		// 2 given back at 11s, a new block; the first reservation's 5 go
		// to the backing store's window: 10 − 2 + 10 − 5.
		{name: "refund after the lease was replaced", limit: fixed, steps: []settleStep{
			{reserve, 10 * s, 8, true, 2},
			{reserve, 11 * s, 8, true, 2},
			{settle, 11 * s, 3, true, 87},
		}, takes: 2, refunds: 2, backing: 87},
		{name: "refund after the lease was replaced, sliding_log", limit: fixed.Using(sluice.SlidingLog), steps: []settleStep{
			{reserve, 10 * s, 8, true, 2},
			{reserve, 11 * s, 8, true, 2},
			{settle, 11 * s, 3, true, 87},
		}, takes: 2, refunds: 2, backing: 87},
		// Each refund goes to the block that consumed its units: the rest
		// of 10s's block is given back to it at 11s, that of 11s's at 12s,
		// and the second reservation's 8 to 11s's block. Once the entries
		// of 10s have expired, the log holds only 12s's block.
		{name: "sliding_log, each refund to its own block", limit: fixed.Using(sluice.SlidingLog), steps: []settleStep{
			{reserve, 10 * s, 8, true, 2},
			{reserve, 11 * s, 8, true, 2},
			{reserve, 12 * s, 8, true, 2},
			{settle, 12 * s, 8, true, 2}, // as reserved: no call
			{settle, 12 * s, 0, true, 82},
			{allow, 70 * s, 1, true, 1},
		}, takes: 3, refunds: 3, backing: 90},
		{name: "refund after the window ended", limit: fixed, steps: []settleStep{
			{reserve, 50 * s, 8, true, 2},
			{settle, 70 * s, 3, true, 100},
		}, takes: 1, refunds: 1, backing: 100},
		{name: "charge within the lease", limit: fixed, steps: []settleStep{
			{reserve, 10 * s, 4, true, 6},
			{settle, 10 * s, 7, true, 3},
		}, takes: 1, backing: 90},
		// 100 charged: 6 from the lease, 94 to the store, whose count of
		// 104 denies the next request.
		{name: "charge beyond the lease", limit: fixed, steps: []settleStep{
			{reserve, 10 * s, 4, true, 6},
			{settle, 10 * s, 104, false, 0},
			{allow, 10 * s, 1, false, 0},
		}, takes: 3, charges: 1, backing: 0},
		{name: "cost above the block", limit: fixed, steps: []settleStep{
			{reserve, 10 * s, 30, true, 70},
			{settle, 10 * s, 5, true, 95},
		}, takes: 1, refunds: 1, backing: 95},
		{name: "refund without a take", limit: fixed, steps: []settleStep{
			{allow, 10 * s, 1, true, 9},
			{refund, 10 * s, 3, true, 93}, // the store's window: 10 − 3
			{allow, 10 * s, 1, true, 8},   // the lease is untouched
		}, takes: 1, refunds: 1, backing: 93},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &storetest.Counting{Store: memory.New()}
			leased, err := lease.New(c, lease.Block(10))
			if err != nil {
				t.Fatal(err)
			}
			clock := storetest.NewClock()
			lim := sluice.New(leased, sluice.WithClock(clock.Now))
			ctx := context.Background()
			var reserved []*sluice.Reservation
			for i, st := range tc.steps {
				clock.Set(st.at)
				var got sluice.MultiResult
				switch st.op {
				case reserve:
					var r *sluice.Reservation
					r, err = lim.Reserve(ctx, "k", tc.limit, st.n)
					if r != nil {
						reserved, got = append(reserved, r), r.MultiResult
					}
				case settle:
					got, err = reserved[0].Settle(ctx, st.n)
					reserved = reserved[1:]
				case allow:
					got.Result, err = lim.AllowN(ctx, "k", tc.limit, st.n)
				case refund:
					got, err = lim.Refund(ctx, sluice.Part{Key: "k", Limits: []sluice.Limit{tc.limit}, Cost: st.n})
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got.Allowed != st.allowed || got.Remaining != st.remaining {
					t.Errorf("step %d: %+v, want allowed %v, remaining %d", i, got.Result, st.allowed, st.remaining)
				}
			}
			last := tc.steps[len(tc.steps)-1].at
			if r := take(t, c.Store, one("k", tc.limit, 0, storetest.Epoch.Add(last))); r.Remaining != tc.backing {
				t.Errorf("the backing store has %d left, want %d", r.Remaining, tc.backing)
			}
			if c.Takes() != tc.takes || c.Refunds() != tc.refunds || c.Charges() != tc.charges {
				t.Errorf("backing calls: %d takes, %d refunds, %d charges; want %d, %d, %d",
					c.Takes(), c.Refunds(), c.Charges(), tc.takes, tc.refunds, tc.charges)
			}
		})
	}
}

// withTTL is a lease Store whose state lifetimes are its backing
// memory store's, for the conformance suite.
type withTTL struct {
	*lease.Store
	backing *memory.Store
}

func (w withTTL) TTL(ctx context.Context, key string, l sluice.Limit) (time.Duration, error) {
	return w.backing.TTL(ctx, key, l)
}

// The conformance suite over a lease Store that leases nothing
// (MinCapacity above every limit): its exact Results cannot hold for
// leased requests, whose Remaining is their lease's, but it proves that
// the requests a lease does not answer reach the backing store's Take,
// Peek, TakeAt, Refund, Charge and Reset unchanged, reservations and
// settles included.
func TestConformanceUnleased(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) sluice.Store {
		m := memory.New(memory.WithClock(now))
		s, err := lease.New(m, lease.MinCapacity(math.MaxInt))
		if err != nil {
			t.Fatal(err)
		}
		return withTTL{s, m}
	})
}
