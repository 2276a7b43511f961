package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/lease"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// newLeased returns a lease Store over a counting memory store.
func newLeased(t *testing.T, opts ...lease.Option) (*lease.Store, *counting) {
	t.Helper()
	c := &counting{Store: memory.New()}
	s, err := lease.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backing sluice.Store
		opts    []lease.Option
		want    string
	}{
		{"nil backing", nil, nil, "backing store is nil"},
		{"block 0", memory.New(), []lease.Option{lease.Block(0)}, "Block must be at least 1, got 0"},
		{"negative max age", memory.New(), []lease.Option{lease.MaxAge(-time.Second)}, "MaxAge must not be negative, got -1s"},
		{"max leases 0", memory.New(), []lease.Option{lease.MaxLeases(0)}, "MaxLeases must be at least 1, got 0"},
		{"negative min capacity", memory.New(), []lease.Option{lease.MinCapacity(-1)}, "MinCapacity must not be negative, got -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := lease.New(tc.backing, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || s != nil {
				t.Fatalf("New: %v, %v; want an error saying %q", s, err, tc.want)
			}
		})
	}
}

// A lease answers B decisions per backing call, with honest Results: the
// lease's Remaining, the block's ResetAfter less the time since, and the
// backing store holding the whole block as consumed.
func TestLeaseAnswersLocally(t *testing.T) {
	for _, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			s, c := newLeased(t, lease.Block(10))
			l := sluice.PerMinute(100).Using(a)
			t0 := storetest.Epoch.Add(15 * time.Second)
			for i := range 10 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				r := take(t, s, one("k", l, 1, now))
				if !r.Allowed || r.Limit != 100 || r.Remaining != 9-i || r.RetryAfter != 0 {
					t.Fatalf("request %d: %+v; want allowed, limit 100, remaining %d", i, r, 9-i)
				}
				if i == 0 {
					continue
				}
				// The backing store's own view: the block is consumed.
				peek := take(t, c.Store, one("k", l, 0, now))
				if peek.Remaining != 90 {
					t.Fatalf("backing store remaining %d after one block, want 90", peek.Remaining)
				}
				if r.ResetAfter > peek.ResetAfter || r.ResetAfter <= 0 {
					t.Fatalf("request %d: ResetAfter %s, backing store says %s: a lease must not promise an earlier reset", i, r.ResetAfter, peek.ResetAfter)
				}
			}
			if n := c.takes.Load(); n != 1 {
				t.Fatalf("10 decisions made %d backing Take calls, want 1", n)
			}
			r := take(t, s, one("k", l, 1, t0.Add(20*time.Millisecond)))
			if !r.Allowed || r.Remaining != 9 || c.takes.Load() != 2 {
				t.Fatalf("11th request: %+v after %d takes; want a second block", r, c.takes.Load())
			}
			if r := take(t, c.Store, one("k", l, 0, t0.Add(20*time.Millisecond))); r.Remaining != 80 {
				t.Fatalf("backing remaining %d after two blocks, want 80", r.Remaining)
			}
		})
	}
}

// Requests a lease cannot answer go to the backing store unchanged, once,
// and get exactly what a plain store answers.
func TestPassThrough(t *testing.T) {
	now := storetest.Epoch
	a := sluice.PerMinute(10).Using(sluice.FixedWindow)
	b := sluice.PerMinute(5).Using(sluice.SlidingLog)
	every := lease.MinCapacity(1)
	for _, tc := range []struct {
		name string
		req  sluice.Request
		min  lease.Option // MinCapacity
	}{
		{"two limits", sluice.Request{Parts: []sluice.Part{{Key: "k", Limits: []sluice.Limit{a, b}, Cost: 1}}, Now: now}, nil},
		{"two parts", sluice.Request{Parts: []sluice.Part{{Key: "k", Limits: []sluice.Limit{a}, Cost: 1}, {Key: "j", Limits: []sluice.Limit{b}, Cost: 1}}, Now: now}, nil},
		{"cost 0", one("k", a, 0, now), nil},
		{"cost above the block", one("k", a, 4, now), nil},
		// 10 < 10 × 3 (the default): a block would be a third of the limit.
		{"capacity below MinCapacity", one("k", a, 1, now), nil},
		{"capacity below MinCapacity(11)", one("k", a, 1, now), lease.MinCapacity(11)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			minOpt := tc.min
			if minOpt == nil && !strings.HasPrefix(tc.name, "capacity") {
				minOpt = every
			}
			s, c := newLeased(t, lease.Block(3), minOpt)
			plain := memory.New()
			for i := range 4 {
				got, err := s.Take(context.Background(), tc.req)
				want, werr := plain.Take(context.Background(), tc.req)
				if err != nil || werr != nil {
					t.Fatal(err, werr)
				}
				if len(got) != len(want) {
					t.Fatalf("request %d: %d results, want %d", i, len(got), len(want))
				}
				for j := range got {
					if got[j] != want[j] {
						t.Fatalf("request %d, limit %d: %+v, want the plain store's %+v", i, j, got[j], want[j])
					}
				}
				if n := c.takes.Load(); n != int64(i+1) {
					t.Fatalf("after %d requests %d backing calls, want one each", i+1, n)
				}
			}
			if s.Len() != 0 {
				t.Fatalf("pass-through requests left %d leases", s.Len())
			}
		})
	}
}

// A block is clamped to the limit's capacity; when a whole block no longer
// fits, the remainder is leased; a lease too small for a cost is topped up
// to a block; when not even the cost fits, the store's own denial is
// returned: exactly the limit is admitted, whatever the cost.
func TestRemainderAndDenial(t *testing.T) {
	now := storetest.Epoch.Add(10 * time.Second)
	for _, tc := range []struct {
		name  string
		limit sluice.Limit
		block int
		cost  int
		admit int // requests admitted
		takes int // backing calls for them and one denied request
	}{
		// 25 = 10+10+5: two blocks, B denied, 5 leased, then the denial:
		// B denied and the cost denied.
		{"remainder", sluice.PerMinute(25).Using(sluice.FixedWindow), 10, 1, 25, 2 + 2 + 2},
		// Capacity 8 < B: one block of 8, then B and the cost denied.
		{"clamped", sluice.PerMinute(8).Using(sluice.SlidingLog), 100, 1, 8, 1 + 2},
		// Cost 3 of blocks of 5 in 12: a block (2 left), topped up by 3
		// twice (count 8, 11), then 3 denied with 1 remaining: 1 leased
		// (count 12, exactly the limit), then the denial.
		{"costs", sluice.PerMinute(12).Using(sluice.FixedWindow), 5, 3, 4, 1 + 1 + 1 + 2 + 2},
		// Cost 1 in a token bucket of burst 7, blocks of 3: 3, 3, then
		// remaining 1: leased, then denial.
		{"bucket", sluice.PerMinute(7).Using(sluice.GCRA), 3, 1, 7, 2 + 2 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := newLeased(t, lease.Block(tc.block), lease.MinCapacity(1))
			plain := memory.New()
			admitted := 0
			var last sluice.Result
			for range 100 {
				r := take(t, s, one("k", tc.limit, tc.cost, now))
				if !r.Allowed {
					last = r
					break
				}
				admitted++
			}
			if admitted != tc.admit || c.takes.Load() != int64(tc.takes) {
				t.Fatalf("admitted %d with %d backing calls, want %d with %d", admitted, c.takes.Load(), tc.admit, tc.takes)
			}
			// The denial is the store's own: the same as a plain store's
			// with as much consumed (blocks consumed = admitted here).
			for range admitted * tc.cost {
				take(t, plain, one("k", tc.limit, 1, now))
			}
			if want := take(t, plain, one("k", tc.limit, tc.cost, now)); last != want {
				t.Fatalf("denial %+v, want the store's %+v", last, want)
			}
			if last.RetryAfter <= 0 {
				t.Fatalf("denial %+v without a RetryAfter", last)
			}
		})
	}
}

// A lease ends when the backing state it was counted in does, or at
// MaxAge: fixed_window at the window's end, sliding_window at the current
// window's end (not ResetAfter, a window later), token_bucket when the
// bucket is full again.
func TestLeaseEnds(t *testing.T) {
	start := storetest.Epoch.Add(50 * time.Second)
	for _, tc := range []struct {
		name  string
		limit sluice.Limit
		opts  []lease.Option
		end   time.Duration // after start
	}{
		{"fixed_window", sluice.PerMinute(100).Using(sluice.FixedWindow), nil, 10 * time.Second},
		{"sliding_window", sluice.PerMinute(100).Using(sluice.SlidingWindow), nil, 10 * time.Second},
		// 10 tokens at 600ms each.
		{"token_bucket", sluice.PerMinute(100), nil, 6 * time.Second},
		{"gcra", sluice.PerMinute(100).Using(sluice.GCRA), nil, 6 * time.Second},
		{"sliding_log", sluice.PerMinute(100).Using(sluice.SlidingLog), nil, time.Minute},
		{"max age", sluice.PerMinute(100).Using(sluice.FixedWindow), []lease.Option{lease.MaxAge(time.Second)}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := newLeased(t, append(tc.opts, lease.Block(10))...)
			take(t, s, one("k", tc.limit, 1, start))
			last := start.Add(tc.end - time.Microsecond)
			if r := take(t, s, one("k", tc.limit, 1, last)); !r.Allowed || r.Remaining != 8 || c.takes.Load() != 1 {
				t.Fatalf("a µs before the end: %+v after %d takes; want the lease's 9th unit", r, c.takes.Load())
			}
			if r := take(t, s, one("k", tc.limit, 1, start.Add(tc.end))); !r.Allowed || r.Remaining != 9 || c.takes.Load() != 2 {
				t.Fatalf("at the end: %+v after %d takes; want a new block", r, c.takes.Load())
			}
			// Before the lease's start (a clock stepped back): the store.
			if take(t, s, one("k", tc.limit, 1, start)); c.takes.Load() != 3 {
				t.Fatalf("a request before the lease began was answered by it")
			}
		})
	}
}

// The store's own clock (no Now): leases on this process's clock.
func TestStoreClock(t *testing.T) {
	s, c := newLeased(t, lease.Block(10))
	lim := sluice.New(s)
	l := sluice.PerHour(1000).Using(sluice.FixedWindow)
	for i := range 30 {
		r, err := lim.Allow(context.Background(), "k", l)
		if err != nil || !r.Allowed || r.Remaining != 9-i%10 {
			t.Fatalf("request %d: %+v, %v", i, r, err)
		}
		if r.ResetAfter > time.Hour || r.ResetAfter <= 0 {
			t.Fatalf("ResetAfter %s outside (0, 1h]", r.ResetAfter)
		}
	}
	if n := c.takes.Load(); n != 3 {
		t.Fatalf("30 decisions, %d backing calls; want 3", n)
	}
	// A caller's Now does not use a lease taken on the store's clock.
	if take(t, s, one("k", l, 1, time.Now())); c.takes.Load() != 4 {
		t.Fatalf("a lease on the store's clock answered a request with its own Now")
	}
}

// Reset drops the replica's lease and resets the backing store.
func TestReset(t *testing.T) {
	s, c := newLeased(t, lease.Block(10), lease.MinCapacity(1))
	l := sluice.PerMinute(20).Using(sluice.FixedWindow)
	now := storetest.Epoch
	for range 13 {
		take(t, s, one("k", l, 1, now))
	}
	other := sluice.PerMinute(20).Using(sluice.FixedWindow).Named("other")
	take(t, s, one("k", other, 1, now))
	if err := s.Reset(context.Background(), "k", l); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 {
		t.Fatalf("%d leases after resetting one of two, want 1", s.Len())
	}
	if r := take(t, c.Store, one("k", l, 0, now)); r.Remaining != 20 {
		t.Fatalf("backing store remaining %d after Reset, want 20", r.Remaining)
	}
	before := c.takes.Load()
	if r := take(t, s, one("k", l, 1, now)); r.Remaining != 9 || c.takes.Load() != before+1 {
		t.Fatalf("after Reset: %+v; want a fresh block (the old lease's 7 units dropped)", r)
	}
	// The other limit's lease is untouched.
	if r := take(t, s, one("k", other, 1, now)); r.Remaining != 8 || c.takes.Load() != before+1 {
		t.Fatalf("other limit after Reset: %+v; want its lease's next unit", r)
	}
}

// MaxLeases bounds the leases held; ended leases are evicted first, and
// decisions stay right when leases are evicted.
func TestMaxLeases(t *testing.T) {
	s, c := newLeased(t, lease.Block(5), lease.MaxLeases(4), lease.MinCapacity(1))
	l := sluice.PerMinute(5).Using(sluice.FixedWindow)
	now := storetest.Epoch
	for k := range 40 {
		key := string(rune('a' + k%26))
		if k >= 26 {
			key += "2"
		}
		if r := take(t, s, one(key, l, 1, now)); !r.Allowed || r.Remaining != 4 {
			t.Fatalf("key %s: %+v", key, r)
		}
		if n := s.Len(); n > 4 {
			t.Fatalf("%d leases held, cap 4", n)
		}
	}
	// A key whose lease was evicted is not admitted beyond its limit: its
	// block stays consumed in the backing store.
	admitted := 1
	for range 10 {
		if take(t, s, one("a", l, 1, now)).Allowed {
			admitted++
		}
	}
	if admitted > 5 {
		t.Fatalf("key a admitted %d of a limit of 5", admitted)
	}
	_ = c
}

// blocking is a real memory store whose Take and TakeAt wait for gate.
type blocking struct {
	sluice.Store
	gate    chan struct{}
	entered chan struct{}
}

func (b *blocking) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	b.entered <- struct{}{}
	<-b.gate
	return b.Store.Take(ctx, req)
}

// TakeAt waits for gate as Take does: a lease refills through it.
func (b *blocking) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	b.entered <- struct{}{}
	<-b.gate
	return b.Store.TakeAt(ctx, req)
}

// One refill per key is in flight; the others wait for it, and give up
// when their context does.
func TestRefillWaiters(t *testing.T) {
	b := &blocking{Store: memory.New(), gate: make(chan struct{}), entered: make(chan struct{}, 10)}
	s, err := lease.New(b, lease.Block(10))
	if err != nil {
		t.Fatal(err)
	}
	l := sluice.PerMinute(100).Using(sluice.FixedWindow)
	now := storetest.Epoch
	first := make(chan sluice.Result)
	go func() {
		rs, err := s.Take(context.Background(), one("k", l, 1, now))
		if err != nil {
			t.Error(err)
		}
		first <- rs[0]
	}()
	<-b.entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, one("k", l, 1, now)); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter whose context ended: %v, want context.Canceled", err)
	}
	var wg sync.WaitGroup
	results := make(chan sluice.Result, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, err := s.Take(context.Background(), one("k", l, 1, now))
			if err != nil {
				t.Error(err)
				return
			}
			results <- rs[0]
		}()
	}
	close(b.gate)
	if r := <-first; !r.Allowed || r.Remaining != 9 {
		t.Fatalf("refill: %+v", r)
	}
	wg.Wait()
	close(results)
	seen := map[int]bool{}
	for r := range results {
		if !r.Allowed || seen[r.Remaining] {
			t.Fatalf("waiter: %+v (remaining seen before: %v)", r, seen[r.Remaining])
		}
		seen[r.Remaining] = true
	}
	if len(b.entered) != 0 {
		t.Fatalf("waiters made %d backing calls; the block answers them", len(b.entered))
	}
}

// Concurrent decisions and resets on a few keys, for the race detector;
// every lease Result is consistent.
func TestConcurrentResets(t *testing.T) {
	s, _ := newLeased(t, lease.Block(4), lease.MaxLeases(2))
	lim := sluice.New(s)
	l := sluice.PerMinute(1000).Using(sluice.TokenBucket)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := string(rune('a' + g%3))
			for i := range 200 {
				if g == 0 && i%10 == 0 {
					if err := lim.Reset(context.Background(), key, l); err != nil {
						t.Error(err)
						return
					}
				}
				r, err := lim.Allow(context.Background(), key, l)
				if err != nil || r.Remaining < 0 || r.Limit != 1000 {
					t.Errorf("%+v, %v", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s.Len() > 2 {
		t.Fatalf("%d leases held, cap 2", s.Len())
	}
}

// TestBlockFor: with BlockFor, each limit leases blocks of its own size
// (clamped to its capacity), a limit of block 0 is not leased whatever
// its capacity, and a change of f's answers applies to the next refill.
func TestBlockFor(t *testing.T) {
	var blocks sync.Map // limit name → block
	blocks.Store("search", 5)
	blocks.Store("tiny", 50)
	s, c := newLeased(t, lease.BlockFor(func(l sluice.Limit) int {
		n, _ := blocks.Load(l.Name)
		b, _ := n.(int)
		return b
	}))
	now := storetest.Epoch.Add(time.Second)
	search := sluice.PerMinute(1000).Using(sluice.FixedWindow).Named("search")
	other := sluice.PerMinute(1000).Using(sluice.FixedWindow).Named("other")
	tiny := sluice.PerMinute(3).Using(sluice.FixedWindow).Named("tiny")
	for range 5 {
		take(t, s, one("k", search, 1, now))
	}
	if n := c.takes.Load(); n != 1 {
		t.Errorf("5 requests under a block of 5: %d backing takes, want 1", n)
	}
	for range 3 {
		take(t, s, one("k", other, 1, now))
	}
	if n := c.takes.Load(); n != 4 {
		t.Errorf("3 requests under a limit of block 0: %d backing takes in all, want 1+3", n)
	}
	if r := take(t, s, one("k", tiny, 1, now)); !r.Allowed || r.Remaining != 2 {
		t.Errorf("a block of 50 of a limit of 3: %+v, want a lease of 3 (clamped), 2 left", r)
	}
	if r := take(t, c.Store, one("k", tiny, 0, now)); r.Remaining != 0 {
		t.Errorf("backing remaining %d, want 0: the block was clamped to the capacity", r.Remaining)
	}
	blocks.Store("search", 0) // a reload stops leasing search
	before := c.takes.Load()
	for range 2 {
		take(t, s, one("k", search, 1, now))
	}
	if n := c.takes.Load() - before; n != 2 {
		t.Errorf("2 requests after search's block became 0: %d backing takes, want 2", n)
	}
}
