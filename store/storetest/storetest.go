// Package storetest is the conformance suite every sluice.Store must pass.
// It drives a store through the same scenarios with a fake clock, for all
// five algorithms, and demands exact Results: admits per window, the
// fixed-window boundary burst and its absence in sliding_log, refill over
// time, costs, Remaining, ResetAfter and RetryAfter values, RetryAfter
// honesty, state lifetimes, multi-limit all or nothing, token_bucket and
// gcra agreeing, invalid limits, key isolation, exactness under
// concurrency, a Peek (Store.Peek) that
// answers what Take would and changes nothing, and refunds, settles and
// debts (Store.Refund and Charge) that leave a key as
// if it had consumed what the work cost, and Concurrency slots (held,
// released, renewed and leased: Store.Renew). Because the expected Results are the same constants for
// every store, a scenario produces the same Result in every store; a
// randomized differential test compares every store with the reference
// algorithms in internal/algo besides.
//
// A store's test calls Run:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, now func() time.Time) sluice.Store {
//			return memory.New(memory.WithClock(now))
//		})
//	}
package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// Factory returns a new, empty store for one test. now is the suite's fake
// clock, for stores that read a clock of their own (for expiry).
type Factory func(t *testing.T, now func() time.Time) sluice.Store

// TTLer is a store that tells how long the state of a key under a limit
// will live. The suite checks that every piece of state lives exactly as
// long as needed: until it is equivalent to no state at all.
type TTLer interface {
	TTL(ctx context.Context, key string, l sluice.Limit) (time.Duration, error)
}

// Epoch is the fake clock's starting instant, aligned to whole days so that
// window boundaries fall at round offsets from it.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a fake clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading Epoch.
func NewClock() *Clock { return &Clock{t: Epoch} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to Epoch+d.
func (c *Clock) Set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = Epoch.Add(d)
}

// Run runs every scenario of the suite against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	t.Run("AdmitsPerWindow", func(t *testing.T) { testAdmitsPerWindow(t, newStore) })
	t.Run("FixedWindowBoundary", func(t *testing.T) { testBoundary(t, newStore) })
	t.Run("Refill", func(t *testing.T) { testRefill(t, newStore) })
	t.Run("Costs", func(t *testing.T) { testCosts(t, newStore) })
	t.Run("RetryAfterHonest", func(t *testing.T) { testRetryAfterHonest(t, newStore) })
	t.Run("TTL", func(t *testing.T) { testTTL(t, newStore) })
	t.Run("MultiLimit", func(t *testing.T) { testMulti(t, newStore) })
	t.Run("ChangeLimit", func(t *testing.T) { testChangeLimit(t, newStore) })
	t.Run("TokenBucketEqualsGCRA", func(t *testing.T) { testBucketEqualsGCRA(t, newStore) })
	t.Run("MatchesReference", func(t *testing.T) { testMatchesReference(t, newStore) })
	t.Run("Invalid", func(t *testing.T) { testInvalid(t, newStore) })
	t.Run("Reset", func(t *testing.T) { testReset(t, newStore) })
	t.Run("Precision", func(t *testing.T) { testPrecision(t, newStore) })
	t.Run("ClockBackwards", func(t *testing.T) { testClockBackwards(t, newStore) })
	t.Run("LogBackwards", func(t *testing.T) { testLogBackwards(t, newStore) })
	t.Run("KeysIsolated", func(t *testing.T) { testKeys(t, newStore) })
	t.Run("StoreClock", func(t *testing.T) { testStoreClock(t, newStore) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, newStore) })
	t.Run("Peek", func(t *testing.T) { testPeek(t, newStore) })
	t.Run("Refund", func(t *testing.T) { testRefund(t, newStore) })
	t.Run("RefundCases", func(t *testing.T) { testRefundCases(t, newStore) })
	t.Run("Settle", func(t *testing.T) { testSettle(t, newStore) })
	t.Run("Debt", func(t *testing.T) { testDebt(t, newStore) })
	t.Run("SettleErrors", func(t *testing.T) { testSettleErrors(t, newStore) })
	t.Run("LimiterRefund", func(t *testing.T) { testLimiterRefund(t, newStore) })
	t.Run("Slots", func(t *testing.T) { testSlots(t, newStore) })
}

// env is one test's store, fake clock and limiter.
type env struct {
	t     *testing.T
	store sluice.Store
	clock *Clock
	lim   *sluice.Limiter
}

func newEnv(t *testing.T, newStore Factory) *env {
	c := NewClock()
	s := newStore(t, c.Now)
	return &env{t: t, store: s, clock: c, lim: sluice.New(s, sluice.WithClock(c.Now))}
}

// step is one request in a scenario: at Epoch+at, cost n, expecting want.
type step struct {
	at   time.Duration
	n    int
	want sluice.Result
}

// ok and deny build expected Results; the Limit field is filled in by run.
func ok(remaining int, reset time.Duration) sluice.Result {
	return sluice.Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func deny(remaining int, reset, retry time.Duration) sluice.Result {
	return sluice.Result{Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

// run plays steps for key under l and reports every mismatch.
func (e *env) run(key string, l sluice.Limit, steps []step) {
	e.t.Helper()
	for i, s := range steps {
		e.play(key, l, i, s)
	}
}

// play plays step i, s, for key under l, reports a mismatch and returns
// the Result.
func (e *env) play(key string, l sluice.Limit, i int, s step) sluice.Result {
	e.t.Helper()
	e.clock.Set(s.at)
	got, err := e.lim.AllowN(context.Background(), key, l, s.n)
	if err != nil {
		e.t.Fatalf("%s: step %d: AllowN(t=%v, n=%d): %v", l, i, s.at, s.n, err)
	}
	want := s.want
	want.Limit = l.Capacity()
	if got != want {
		e.t.Errorf("%s: step %d: AllowN(t=%v, n=%d) = %+v, want %+v", l, i, s.at, s.n, got, want)
	}
	return got
}

// ttler returns e's store as a TTLer, failing the test if it is not one.
func (e *env) ttler() TTLer {
	e.t.Helper()
	ttler, ok := e.store.(TTLer)
	if !ok {
		e.t.Fatalf("%T does not implement storetest.TTLer", e.store)
	}
	return ttler
}

// checkTTL reports an error unless the state of key under l lives as long
// as r, the last decision on it, says: r.ResetAfter, until it is
// equivalent to none.
func (e *env) checkTTL(key string, l sluice.Limit, r sluice.Result) {
	e.t.Helper()
	got, err := e.ttler().TTL(context.Background(), key, l)
	if err != nil {
		e.t.Fatal(err)
	}
	// A store may round up to its resolution (Redis: 1ms) and its real
	// clock runs on while the fake one stands still.
	if got > r.ResetAfter.Round(time.Millisecond)+time.Millisecond || got < r.ResetAfter-time.Second {
		e.t.Errorf("%s at %v: TTL = %v, want the ResetAfter %v", l, e.clock.Now().Sub(Epoch), got, r.ResetAfter)
	}
}

// each runs f once per algorithm as a subtest.
func each(t *testing.T, f func(t *testing.T, a sluice.Algorithm)) {
	for _, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) { f(t, a) })
	}
}
