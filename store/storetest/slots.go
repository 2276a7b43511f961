package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// The slot scenarios judge Concurrency limits: slots held until released
// or until their lease ends, renewed, released by name or (a release not
// known) the first to end, stacked with rate limits all or nothing, and
// exact under concurrency. Leases are an hour long: a Redis server expires
// keys by its own clock, which runs on while the fake one stands still.

// lease is the lease of the slot scenarios' limits.
const lease = time.Hour

// testSlots runs the slot scenarios; they renew slots too (Store.Renew).
func testSlots(t *testing.T, newStore Factory) {
	t.Run("HoldAndRelease", func(t *testing.T) { testHoldAndRelease(t, newStore) })
	t.Run("LeaseEnds", func(t *testing.T) { testLeaseEnds(t, newStore) })
	t.Run("Renew", func(t *testing.T) { testRenew(t, newStore) })
	t.Run("ReleaseNotKnown", func(t *testing.T) { testReleaseNotKnown(t, newStore) })
	t.Run("Stacked", func(t *testing.T) { testSlotsStacked(t, newStore) })
	t.Run("CostAndPeek", func(t *testing.T) { testSlotCost(t, newStore) })
	t.Run("ChangeLimit", func(t *testing.T) { testSlotsChangeLimit(t, newStore) })
	t.Run("NeedsSlot", func(t *testing.T) { testNeedsSlot(t, newStore) })
	t.Run("Exact", func(t *testing.T) { testSlotsExact(t, newStore) })
}

// acquire acquires a slot of l for key at Epoch+at, failing the test on
// an error or a Result other than want (its Limit filled in).
func (e *env) acquire(key string, l sluice.Limit, at time.Duration, want sluice.Result) *sluice.Reservation {
	e.t.Helper()
	e.clock.Set(at)
	r, err := e.lim.Acquire(context.Background(), key, l)
	if err != nil {
		e.t.Fatalf("%s: Acquire(t=%v): %v", l, at, err)
	}
	want.Limit = l.Limit
	if r.Result != want {
		e.t.Errorf("%s: Acquire(t=%v) = %+v, want %+v", l, at, r.Result, want)
	}
	return r
}

// release releases r at Epoch+at and checks the state it reports.
func (e *env) release(r *sluice.Reservation, l sluice.Limit, at time.Duration, want sluice.Result) {
	e.t.Helper()
	e.clock.Set(at)
	got, err := r.Release(context.Background())
	if err != nil {
		e.t.Fatalf("%s: Release(t=%v): %v", l, at, err)
	}
	want.Limit = l.Limit
	if got.Result != want {
		e.t.Errorf("%s: Release(t=%v) = %+v, want %+v", l, at, got.Result, want)
	}
}

// peekSlots checks the state of key under l at Epoch+at.
func (e *env) peekSlots(key string, l sluice.Limit, at time.Duration, want sluice.Result) {
	e.t.Helper()
	e.clock.Set(at)
	got, err := e.lim.AllowN(context.Background(), key, l, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	want.Limit = l.Limit
	if got != want {
		e.t.Errorf("%s at %v: state %+v, want %+v", l, at, got, want)
	}
}

func testHoldAndRelease(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	l := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 3, Period: lease}
	m := time.Minute
	a := e.acquire("k", l, 0, ok(2, lease))
	b := e.acquire("k", l, 1*m, ok(1, lease))
	e.acquire("k", l, 2*m, ok(0, lease))
	// The state lives until its last lease ends. (Checked where it was
	// written: Redis counts a TTL on its own clock, not the test's.)
	e.checkTTL("k", l, sluice.Result{ResetAfter: lease})
	// Full: the first lease to end frees the next slot.
	e.acquire("k", l, 3*m, deny(0, lease-m, lease-3*m))
	e.release(b, l, 4*m, ok(1, lease-2*m))
	e.checkTTL("k", l, sluice.Result{ResetAfter: lease - 2*m})
	d := e.acquire("k", l, 5*m, ok(0, lease))
	// A second release frees nothing, and neither does the store asked
	// again for b's slot: it is no longer held.
	if _, err := b.Release(context.Background()); !errors.Is(err, sluice.ErrSettled) {
		t.Errorf("a second Release: %v, want ErrSettled", err)
	}
	parts, taken, okTaken := b.Taken()
	if !okTaken || taken.Slot == "" || taken.Slot != b.Slot() || b.Slot() == d.Slot() || a.Slot() == b.Slot() {
		t.Fatalf("Taken() = %v %+v %v; slots %q %q %q: want the reservation's own slot", parts, taken, okTaken, a.Slot(), b.Slot(), d.Slot())
	}
	e.clock.Set(6 * m)
	rs, err := settler(t, e.store).Refund(context.Background(), sluice.Request{Parts: parts, Now: e.clock.Now()}, taken)
	if err != nil {
		t.Fatal(err)
	}
	if want := (sluice.Result{Allowed: true, Limit: 3, ResetAfter: lease - m}); rs[0] != want {
		t.Errorf("b's slot released again: %+v, want %+v (nothing freed)", rs[0], want)
	}
	e.acquire("k", l, 7*m, deny(0, lease-2*m, lease-7*m))
	// RetryAfter is honest: denied a microsecond before, admitted at it.
	e.acquire("k", l, lease-time.Microsecond, deny(0, 5*m+time.Microsecond, time.Microsecond))
	e.acquire("k", l, lease, ok(0, lease))
	e.release(a, l, lease+m, ok(0, lease-m)) // a's lease ended: nothing to free
}

func testLeaseEnds(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	l := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 1, Period: lease}
	a := e.acquire("k", l, 0, ok(0, lease))
	e.acquire("k", l, lease/2, deny(0, lease/2, lease/2))
	// The lease ends at lease: the slot is free then, to another.
	b := e.acquire("k", l, lease, ok(0, lease))
	e.release(a, l, lease+time.Minute, ok(0, lease-time.Minute))
	e.acquire("k", l, lease+2*time.Minute, deny(0, lease-2*time.Minute, lease-2*time.Minute))
	e.release(b, l, lease+3*time.Minute, ok(1, 0))
	e.checkTTL("k", l, sluice.Result{})
}

func testRenew(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	l := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 2, Period: lease}
	m := time.Minute
	a := e.acquire("k", l, 0, ok(1, lease))
	e.acquire("k", l, 10*m, ok(0, lease))
	e.clock.Set(40 * m)
	got, err := a.Renew(context.Background())
	if want := (sluice.Result{Allowed: true, Limit: 2, ResetAfter: lease}); err != nil || got.Result != want {
		t.Errorf("Renew at 40m = %+v, %v; want %+v", got.Result, err, want)
	}
	e.checkTTL("k", l, sluice.Result{ResetAfter: lease})
	// The other slot's lease now ends first.
	e.acquire("k", l, 50*m, deny(0, lease-10*m, lease-40*m))
	e.acquire("k", l, lease+10*m, ok(0, lease))
	// a's renewed lease ends at 40m + lease; renewed no more, it is lost.
	e.clock.Set(lease + 40*m)
	if _, err := a.Renew(context.Background()); !errors.Is(err, sluice.ErrSlotLost) {
		t.Errorf("Renew after the lease ended: %v, want ErrSlotLost", err)
	}
	e.peekSlots("k", l, lease+40*m, ok(1, lease-30*m))
}

func testReleaseNotKnown(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	l := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 2, Period: lease}
	m := time.Minute
	e.acquire("k", l, 0, ok(1, lease))
	e.acquire("k", l, m, ok(0, lease))
	st := settler(t, e.store)
	release := func(at time.Duration, want sluice.Result) {
		t.Helper()
		e.clock.Set(at)
		req := sluice.Request{Parts: []sluice.Part{{Key: "k", Limits: []sluice.Limit{l}, Cost: 1}}, Now: e.clock.Now()}
		rs, err := st.Refund(context.Background(), req, sluice.Taken{})
		if err != nil {
			t.Fatal(err)
		}
		want.Limit = 2
		if rs[0] != want {
			t.Errorf("a release not known at %v: %+v, want %+v", at, rs[0], want)
		}
	}
	release(2*m, ok(1, lease-m)) // the first to end: the slot taken at 0
	release(3*m, ok(2, 0))
	release(4*m, ok(2, 0)) // none held: nothing to free
	e.checkTTL("k", l, sluice.Result{})
}

func testSlotsStacked(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	rate := sluice.Limit{Algorithm: sluice.FixedWindow, Limit: 2, Period: 24 * time.Hour}
	slots := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 5, Period: lease}
	ctx := context.Background()
	part := sluice.Part{Key: "k", Limits: []sluice.Limit{rate, slots}, Cost: 1}
	var held []*sluice.Reservation
	for i := range 3 {
		r, err := e.lim.ReserveParts(ctx, part)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed != (i < 2) {
			t.Fatalf("request %d: %+v, want the rate limit to admit 2", i, r.MultiResult)
		}
		held = append(held, r)
	}
	// The request the rate limit denied holds no slot.
	e.peekSlots("k", slots, 0, ok(3, lease))
	// Releasing keeps what the rate limit counted, and frees the slot.
	got, err := held[0].Release(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Results[0].Remaining != 0 || got.Results[1].Remaining != 4 {
		t.Errorf("after a release: %+v, want the window full and 4 slots free", got.Results)
	}
	// The other way round: a request the slots deny consumes no rate.
	one := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 1, Period: lease, Name: "one"}
	wide := sluice.Limit{Algorithm: sluice.FixedWindow, Limit: 10, Period: 24 * time.Hour, Name: "wide"}
	p := sluice.Part{Key: "j", Limits: []sluice.Limit{wide, one}, Cost: 3}
	first, err := e.lim.ReserveParts(ctx, p)
	if err != nil || !first.Allowed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	second, err := e.lim.ReserveParts(ctx, p)
	if err != nil || second.Allowed || second.Binding != 1 {
		t.Fatalf("second: %+v, %v; want denied by the slots", second, err)
	}
	e.run("j", wide, []step{{0, 0, ok(7, 24*time.Hour)}})
	// Settled below its cost: the rate limit gets the difference back, and
	// the slot is free whatever the work cost.
	got, err = first.SettleParts(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Results[0].Remaining != 9 || got.Results[1].Remaining != 1 {
		t.Errorf("settled at 1 of 3: %+v, want 9 left in the window and the slot free", got.Results)
	}
}

func testSlotCost(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	l := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 3, Period: lease}
	// A cost of 5 holds one slot: a concurrency limit counts requests.
	r, err := e.lim.Reserve(context.Background(), "k", l, 5)
	if err != nil || r.Result != (sluice.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: lease}) {
		t.Fatalf("Reserve(5) = %+v, %v", r, err)
	}
	// Cost 0 reads the state and holds nothing.
	e.peekSlots("k", l, time.Minute, ok(2, lease-time.Minute))
	e.peekSlots("k", l, time.Minute, ok(2, lease-time.Minute))
	got, err := e.lim.Peek(context.Background(), sluice.Part{Key: "k", Limits: []sluice.Limit{l}, Cost: 1})
	if err != nil || got.Result != (sluice.Result{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: lease}) {
		t.Errorf("Peek(1) = %+v, %v", got, err)
	}
	e.peekSlots("k", l, time.Minute, ok(2, lease-time.Minute))
	// The Limiter's own Allow holds a slot of a name no one knows, which a
	// release not known frees (Envoy's hits, then is_negative_hits).
	e.clock.Set(2 * time.Minute)
	if res, err := e.lim.Allow(context.Background(), "k", l); err != nil || res.Remaining != 1 {
		t.Errorf("Allow = %+v, %v", res, err)
	}
	if res, err := e.lim.Refund(context.Background(), sluice.Part{Key: "k", Limits: []sluice.Limit{l}, Cost: 1}); err != nil || res.Remaining != 2 {
		t.Errorf("Refund = %+v, %v", res, err)
	}
}

func testSlotsChangeLimit(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	l := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 3, Period: lease}
	m := time.Minute
	e.acquire("k", l, 0, ok(2, lease))
	e.acquire("k", l, m, ok(1, lease))
	e.acquire("k", l, 2*m, ok(0, lease))
	// Raised, with a shorter lease: the slots held stay held.
	raised := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 4, Period: lease / 2}
	e.acquire("k", raised, 3*m, ok(0, lease-m))
	// Lowered below what is held: a slot is free once the leases held
	// fall below the limit (here all 4 must end, the last at 2m+lease).
	lowered := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 1, Period: lease}
	e.acquire("k", lowered, 4*m, deny(0, lease-2*m, lease-2*m))
}

func testNeedsSlot(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	l := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 3, Period: lease}
	req := sluice.Request{Parts: []sluice.Part{{Key: "k", Limits: []sluice.Limit{l}, Cost: 1}}, Now: e.clock.Now()}
	if rs, err := e.store.Take(context.Background(), req); err == nil {
		t.Errorf("a take of a slot without a Slot: %+v, want an error", rs)
	}
	req.Parts[0].Cost = 0
	if _, err := e.store.Take(context.Background(), req); err != nil {
		t.Errorf("a look at the slots without a Slot: %v", err)
	}
}

// testSlotsExact acquires from many goroutines at once: exactly the limit
// is admitted, and once they release, exactly the limit again.
func testSlotsExact(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	l := sluice.Limit{Algorithm: sluice.Concurrency, Limit: 10, Period: lease}
	for round := range 2 {
		var admitted atomic.Int64
		var held sync.Map
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 4 {
					r, err := e.lim.Acquire(context.Background(), "hot", l)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted.Add(1)
						held.Store(r, g)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		if got := admitted.Load(); got != 10 {
			t.Fatalf("round %d: 64 goroutines × 4 acquires held %d slots, want exactly 10", round, got)
		}
		held.Range(func(k, _ any) bool {
			if _, err := k.(*sluice.Reservation).Release(context.Background()); err != nil {
				t.Error(err)
			}
			return true
		})
	}
}
