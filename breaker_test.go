package sluice

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// switchStore fails while fail is set, hangs each call while hang is set
// (until its context ends), and otherwise admits; it counts the calls that
// reached it.
type switchStore struct {
	unsupported
	fail, hang atomic.Bool
	calls      atomic.Int64
	spent      atomic.Int64 // the costs of the calls that succeeded
	read       atomic.Int64
}

func (s *switchStore) costs() int64 { return s.spent.Load() }

var errDown = errors.New("connection refused")

func (s *switchStore) Take(ctx context.Context, req Request) ([]Result, error) {
	s.calls.Add(1)
	for _, p := range req.Parts { // read the whole request, as a store does
		s.read.Add(int64(len(p.Key) + p.Limits[0].Limit))
	}
	if s.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if s.fail.Load() {
		return nil, errDown
	}
	for _, p := range req.Parts {
		s.spent.Add(int64(p.Cost))
	}
	rs := make([]Result, req.Len())
	for i := range rs {
		rs[i] = Result{Allowed: true, Limit: 10, Remaining: 9}
	}
	return rs, nil
}

func (s *switchStore) Reset(context.Context, string, ...Limit) error { return nil }

// oneSwitch is a switchStore that is a OneTaker, deciding by its Take.
type oneSwitch struct{ *switchStore }

func (s oneSwitch) TakeOne(ctx context.Context, key string, limit Limit, cost int, now time.Time) (Result, error) {
	c := call{op: opTakeOne, key: key, limit: limit, n: cost, now: now}
	rs, err := s.Take(ctx, c.request())
	if err != nil {
		return Result{}, err
	}
	return rs[0], nil
}

// changes records what a breaker handler was told.
type changes struct {
	mu    sync.Mutex
	got   []BreakerState
	nodes []int
}

func (c *changes) handle(ch NodeBreaker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if (ch.State == BreakerOpen) != (ch.Err != nil) {
		panic("an opening comes with its error, a closing without")
	}
	c.got = append(c.got, ch.State)
	c.nodes = append(c.nodes, ch.Node)
}

func (c *changes) list() []BreakerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]BreakerState(nil), c.got...)
}

// waitProbe waits until the breaker would send a probe (Probe has passed).
func waitProbe(b Breaker) { time.Sleep(b.Probe + time.Millisecond) }

// waitState waits until lim's breaker is in state, failing t after 10s.
func waitState(t *testing.T, lim *Limiter, state BreakerState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for lim.Breaker() != state {
		if time.Now().After(deadline) {
			t.Fatalf("breaker %s after 10s, want %s", lim.Breaker(), state)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBreakerOpensAndCloses: Failures consecutive failures open the
// breaker; while it is open decisions do not reach the store and the policy
// answers them; after Probe a decision sends a probe (in the background, at
// cost 0) and is answered by the policy, and the probe's success closes the
// breaker. The handler hears one opening and one closing.
func TestBreakerOpensAndCloses(t *testing.T) {
	for _, tc := range []struct {
		p   ErrorPolicy
		one bool // the store is a OneTaker
	}{{AllowOnError, false}, {DenyOnError, false}, {ReturnErrors, false}, {AllowOnError, true}, {DenyOnError, true}, {ReturnErrors, true}} {
		p := tc.p
		name := p.String()
		if tc.one {
			name += "/OneTaker"
		}
		t.Run(name, func(t *testing.T) {
			st := &switchStore{}
			var store Store = st
			if tc.one {
				store = oneSwitch{st}
			}
			var ch changes
			conf := Breaker{Failures: 3, Span: time.Nanosecond, Probe: 20 * time.Millisecond}
			lim := New(store, WithErrorPolicy(p), WithBreaker(conf), WithHooks(Hooks{Breaker: ch.handle}))
			if (lim.one != nil) != tc.one {
				t.Fatalf("the Limiter sees a OneTaker: %v, want %v", lim.one != nil, tc.one)
			}
			ctx := context.Background()
			st.fail.Store(true)
			for i := range 3 {
				if lim.Breaker() != BreakerClosed {
					t.Fatalf("breaker %s after %d failures, want closed until 3", lim.Breaker(), i)
				}
				lim.Allow(ctx, "k", PerSecond(10))
			}
			if lim.Breaker() != BreakerOpen {
				t.Fatalf("breaker %s after 3 consecutive failures, want open", lim.Breaker())
			}
			before := st.calls.Load()
			r, err := lim.Allow(ctx, "k", PerSecond(10))
			if st.calls.Load() != before {
				t.Errorf("a decision reached the store while the breaker was open")
			}
			switch p {
			case ReturnErrors:
				if !errors.Is(err, ErrBreakerOpen) {
					t.Errorf("ReturnErrors with an open breaker: err = %v, want ErrBreakerOpen", err)
				}
			case AllowOnError:
				if err != nil || !r.Allowed || r.Degraded != DegradedAllow {
					t.Errorf("allow with an open breaker: %+v, %v", r, err)
				}
			case DenyOnError:
				if err != nil || r.Allowed || r.Degraded != DegradedDeny {
					t.Errorf("deny with an open breaker: %+v, %v", r, err)
				}
			}
			// Probes that fail keep it open; once the store answers, a probe
			// of its own closes it, with no decision arriving.
			waitProbe(conf)
			waitProbe(conf)
			if lim.Breaker() == BreakerClosed || st.calls.Load() == before {
				t.Errorf("after two Probes with the store failing: breaker %s, %d probes; want open, some", lim.Breaker(), st.calls.Load()-before)
			}
			st.fail.Store(false)
			waitState(t, lim, BreakerClosed)
			r, err = lim.Allow(ctx, "k", PerSecond(10))
			if err != nil || r.Degraded != NotDegraded {
				t.Errorf("after a probe that succeeds: %+v, %v; want the store's answer", r, err)
			}
			if got := ch.list(); len(got) != 2 || got[0] != BreakerOpen || got[1] != BreakerClosed {
				t.Errorf("handler told %v, want [open closed]", got)
			}
		})
	}
}

// TestBreakerNeedsConsecutiveFailures: failures that successes interleave
// never open the breaker.
func TestBreakerNeedsConsecutiveFailures(t *testing.T) {
	st := &switchStore{}
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(Breaker{Failures: 3, Span: time.Nanosecond}))
	for range 100 {
		for _, fail := range []bool{true, true, false} {
			st.fail.Store(fail)
			lim.Allow(context.Background(), "k", PerSecond(10))
		}
	}
	if lim.Breaker() != BreakerClosed {
		t.Errorf("breaker %s after failures two by two, want closed", lim.Breaker())
	}
}

// TestBreakerHalfOpenSendsOneProbe: while the probe hangs at the store,
// no decision reaches it, and every one is answered by the policy at once;
// the probe consumes nothing; a probe that times out leaves the breaker
// open, and the next succeeds.
func TestBreakerHalfOpenSendsOneProbe(t *testing.T) {
	st := &switchStore{}
	conf := Breaker{Failures: 1, Span: time.Nanosecond, Probe: time.Millisecond}
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(conf), WithStoreTimeout(50*time.Millisecond))
	st.fail.Store(true)
	lim.Allow(context.Background(), "k", PerSecond(10))
	waitState(t, lim, BreakerOpen)
	st.hang.Store(true)
	waitProbe(conf)
	calls := st.calls.Load()
	lim.Allow(context.Background(), "k", PerSecond(10)) // sends the probe
	waitState(t, lim, BreakerHalfOpen)
	for range 50 {
		r, err := lim.Allow(context.Background(), "k", PerSecond(10))
		if err != nil || r.Degraded != DegradedAllow {
			t.Fatalf("half-open, a decision: %+v, %v; want the policy's", r, err)
		}
	}
	if got := st.calls.Load() - calls; got > 1 {
		t.Errorf("%d calls reached the store while the probe hung, want the probe alone", got)
	}
	// The probe times out: open again; a probe of its own, with no
	// decision arriving, finds the store back and closes it.
	waitState(t, lim, BreakerOpen)
	st.hang.Store(false)
	st.fail.Store(false)
	waitState(t, lim, BreakerClosed)
	lim.Allow(context.Background(), "k", PerSecond(10))
	if got := st.costs(); got != 1 {
		t.Errorf("the store spent %d in all, want 1 (the decision after the breaker closed; probes spend nothing)", got)
	}
}

// TestBreakerProbesOnItsOwn: an open breaker probes without decisions
// arriving, and closes once the store answers; a caller that gives up
// after waiting longer than Span counts as a failure.
func TestBreakerProbesOnItsOwn(t *testing.T) {
	st := &switchStore{}
	lim := New(st, WithErrorPolicy(DenyOnError), WithBreaker(Breaker{Failures: 2, Span: time.Millisecond, Probe: time.Millisecond}),
		WithStoreTimeout(time.Hour))
	st.hang.Store(true)
	for lim.Breaker() == BreakerClosed {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(5*time.Millisecond, cancel)
		if _, err := lim.Allow(ctx, "k", PerSecond(10)); !errors.Is(err, context.Canceled) {
			t.Fatalf("a caller that gave up: err = %v, want context.Canceled", err)
		}
	}
	st.hang.Store(false)
	waitState(t, lim, BreakerClosed)
}

// TestBreakerSpan: a run of failures shorter than Span does not open the
// breaker, however many failures it holds; one that lasts Span does.
func TestBreakerSpan(t *testing.T) {
	st := &switchStore{}
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(Breaker{Failures: 3, Span: time.Hour}))
	st.fail.Store(true)
	for range 1000 {
		lim.Allow(context.Background(), "k", PerSecond(10))
	}
	if lim.Breaker() != BreakerClosed {
		t.Errorf("breaker %s after 1000 failures within an hour's Span, want closed", lim.Breaker())
	}
	lim = New(st, WithErrorPolicy(AllowOnError), WithBreaker(Breaker{Failures: 3, Span: 20 * time.Millisecond}))
	for lim.Breaker() == BreakerClosed {
		lim.Allow(context.Background(), "k", PerSecond(10))
		time.Sleep(time.Millisecond)
	}
	if lim.Breaker() != BreakerOpen {
		t.Errorf("breaker %s after failing for over its Span, want open", lim.Breaker())
	}
}

// TestBreakerIgnoresStaleFailures: calls that began before the breaker
// opened and fail after it closed again do not reopen it.
func TestBreakerIgnoresStaleFailures(t *testing.T) {
	st := &switchStore{}
	var ch changes
	conf := Breaker{Failures: 2, Span: time.Nanosecond, Probe: time.Millisecond}
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(conf), WithHooks(Hooks{Breaker: ch.handle}))
	b := lim.breaker
	stale := []ticket{}
	for range 5 {
		tk, _ := b.allow()
		stale = append(stale, tk)
	}
	b.done(stale[0], errDown)
	b.done(stale[1], errDown) // opens
	waitProbe(conf)
	probe, ok := b.allow()
	if ok || !probe.probe {
		t.Fatalf("no probe after Probe")
	}
	b.done(probe, nil) // closes
	for _, tk := range stale[2:] {
		b.done(tk, errDown)
	}
	if lim.Breaker() != BreakerClosed {
		t.Errorf("breaker %s after stale failures, want closed", lim.Breaker())
	}
	if got := ch.list(); len(got) != 2 {
		t.Errorf("handler told %v, want one opening and one closing", got)
	}
}

// TestBreakerDefaults: a Limiter whose policy answers for the store has
// the default breaker; ReturnErrors has none unless asked; a negative
// Failures turns it off.
func TestBreakerDefaults(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		want bool
	}{
		{"ReturnErrors", nil, false},
		{"ReturnErrors with a breaker", []Option{WithBreaker(Breaker{})}, true},
		{"deny", []Option{WithErrorPolicy(DenyOnError)}, true},
		{"local", []Option{WithErrorPolicy(LocalOnError(&switchStore{}))}, true},
		{"allow, off", []Option{WithErrorPolicy(AllowOnError), WithBreaker(Breaker{Failures: -1})}, false},
	} {
		lim := New(&switchStore{}, tt.opts...)
		if got := lim.breaker != nil; got != tt.want {
			t.Errorf("%s: breaker %v, want %v", tt.name, got, tt.want)
		}
		if b := lim.breakers; b != nil && (b.threshold != DefaultBreakerFailures || b.span != DefaultBreakerSpan || b.probe != DefaultBreakerProbe) {
			t.Errorf("%s: breaker %d failures, span %v, probe %v; want the defaults", tt.name, b.threshold, b.span, b.probe)
		}
	}
}

// TestBreakerConcurrent: under concurrent failures the breaker opens once
// and, once the store answers, closes once (run with -race).
func TestBreakerConcurrent(t *testing.T) {
	st := &switchStore{}
	var ch changes
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(Breaker{Failures: 5, Span: time.Millisecond, Probe: time.Millisecond}), WithHooks(Hooks{Breaker: ch.handle}))
	st.fail.Store(true)
	var wg sync.WaitGroup
	var stop atomic.Bool
	for range 16 {
		wg.Go(func() {
			for !stop.Load() {
				if _, err := lim.Allow(context.Background(), "k", PerSecond(10)); err != nil {
					t.Errorf("allow policy returned %v", err)
					return
				}
			}
		})
	}
	for lim.Breaker() == BreakerClosed {
		time.Sleep(time.Millisecond)
	}
	st.fail.Store(false)
	for lim.Breaker() != BreakerClosed {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if got := ch.list(); len(got) != 2 || got[0] != BreakerOpen || got[1] != BreakerClosed {
		t.Errorf("handler told %v, want [open closed]", got)
	}
}

// TestProbeOwnsItsRequest: a probe, which outlives the call that sent it,
// reads no memory of the caller's, who may reuse its parts at once (run
// with -race).
func TestProbeOwnsItsRequest(t *testing.T) {
	st := &switchStore{}
	st.fail.Store(true)
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(Breaker{Failures: 1, Span: time.Nanosecond, Probe: time.Millisecond}))
	parts := []Part{{Key: "k", Limits: []Limit{PerSecond(10)}, Cost: 1}}
	for i := range 200 {
		if _, err := lim.AllowParts(context.Background(), parts...); err != nil {
			t.Fatal(err)
		}
		parts[0].Key = "k" + string(rune('a'+i%26))
		parts[0].Limits[0] = PerSecond(10 + i)
		if i%20 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
}
