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
	fail, hang atomic.Bool
	calls      atomic.Int64
}

var errDown = errors.New("connection refused")

func (s *switchStore) Take(ctx context.Context, req Request) ([]Result, error) {
	s.calls.Add(1)
	if s.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if s.fail.Load() {
		return nil, errDown
	}
	rs := make([]Result, req.Len())
	for i := range rs {
		rs[i] = Result{Allowed: true, Limit: 10, Remaining: 9}
	}
	return rs, nil
}

func (s *switchStore) Reset(context.Context, string, ...Limit) error { return nil }

// changes records what a breaker handler was told.
type changes struct {
	mu  sync.Mutex
	got []BreakerState
}

func (c *changes) handle(s BreakerState, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if (s == BreakerOpen) != (err != nil) {
		panic("an opening comes with its error, a closing without")
	}
	c.got = append(c.got, s)
}

func (c *changes) list() []BreakerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]BreakerState(nil), c.got...)
}

// waitProbe waits until the breaker would send a probe (Probe has passed).
func waitProbe(b Breaker) { time.Sleep(b.Probe + time.Millisecond) }

// TestBreakerOpensAndCloses: Failures consecutive failures open the
// breaker; while it is open decisions do not reach the store and the policy
// answers them; after Probe one decision probes, and its success closes
// the breaker. The handler hears one opening and one closing.
func TestBreakerOpensAndCloses(t *testing.T) {
	for _, p := range []ErrorPolicy{AllowOnError, DenyOnError, ReturnErrors} {
		t.Run(p.String(), func(t *testing.T) {
			st := &switchStore{}
			var ch changes
			conf := Breaker{Failures: 3, Probe: 20 * time.Millisecond}
			lim := New(st, WithErrorPolicy(p), WithBreaker(conf), WithBreakerHandler(ch.handle))
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
			// A probe that fails keeps it open.
			waitProbe(conf)
			lim.Allow(ctx, "k", PerSecond(10))
			if got := st.calls.Load() - before; got != 1 || lim.Breaker() != BreakerOpen {
				t.Errorf("after Probe: %d calls reached the store, breaker %s; want 1 (the probe), open", got, lim.Breaker())
			}
			st.fail.Store(false)
			waitProbe(conf)
			r, err = lim.Allow(ctx, "k", PerSecond(10))
			if err != nil || r.Degraded != NotDegraded || lim.Breaker() != BreakerClosed {
				t.Errorf("a probe that succeeds: %+v, %v, breaker %s; want the store's answer, closed", r, err, lim.Breaker())
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
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(Breaker{Failures: 3}))
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
// the other decisions do not reach it, and are answered by the policy.
func TestBreakerHalfOpenSendsOneProbe(t *testing.T) {
	st := &switchStore{}
	conf := Breaker{Failures: 1, Probe: time.Millisecond}
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(conf), WithStoreTimeout(time.Hour))
	st.fail.Store(true)
	lim.Allow(context.Background(), "k", PerSecond(10))
	st.hang.Store(true)
	waitProbe(conf)
	ctx, cancel := context.WithCancel(context.Background())
	probed := make(chan error)
	go func() {
		_, err := lim.Allow(ctx, "k", PerSecond(10))
		probed <- err
	}()
	for lim.Breaker() != BreakerHalfOpen {
		time.Sleep(time.Millisecond)
	}
	calls := st.calls.Load()
	for range 50 {
		r, err := lim.Allow(context.Background(), "k", PerSecond(10))
		if err != nil || r.Degraded != DegradedAllow {
			t.Fatalf("half-open, a decision besides the probe: %+v, %v; want the policy's", r, err)
		}
	}
	if st.calls.Load() != calls {
		t.Errorf("%d decisions besides the probe reached the store", st.calls.Load()-calls)
	}
	// The probe's caller gives up: the next decision probes at once.
	cancel()
	if err := <-probed; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled probe: err = %v, want context.Canceled", err)
	}
	st.hang.Store(false)
	st.fail.Store(false)
	if r, err := lim.Allow(context.Background(), "k", PerSecond(10)); err != nil || r.Degraded != NotDegraded {
		t.Errorf("after an abandoned probe: %+v, %v; want the next decision to probe, and the store to answer", r, err)
	}
}

// TestBreakerIgnoresStaleFailures: calls that began before the breaker
// opened and fail after it closed again do not reopen it.
func TestBreakerIgnoresStaleFailures(t *testing.T) {
	st := &switchStore{}
	var ch changes
	conf := Breaker{Failures: 2, Probe: time.Millisecond}
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(conf), WithBreakerHandler(ch.handle))
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
	if !ok || !probe.probe {
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
		if b := lim.breaker; b != nil && (b.threshold != DefaultBreakerFailures || b.probe != DefaultBreakerProbe) {
			t.Errorf("%s: breaker %d failures, probe %v; want the defaults", tt.name, b.threshold, b.probe)
		}
	}
}

// TestBreakerConcurrent: under concurrent failures the breaker opens once
// and, once the store answers, closes once (run with -race).
func TestBreakerConcurrent(t *testing.T) {
	st := &switchStore{}
	var ch changes
	lim := New(st, WithErrorPolicy(AllowOnError), WithBreaker(Breaker{Failures: 5, Probe: time.Millisecond}), WithBreakerHandler(ch.handle))
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
