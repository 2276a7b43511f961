package sluice_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// Cases a review found the deny cache answering otherwise than the store
// would; each failed before its fix.

// TestDenyCacheResetSameIdentity: Reset forgets the store's state by
// limit identity (Name, Algorithm, Period), but the cache only the exact
// Limit values given: a Reset with an equal limit spelled otherwise
// (Burst 0 or Burst = Limit, Algorithm "" or token_bucket), or with the
// same identity at other numbers, leaves the cached denial in place.
func TestDenyCacheResetSameIdentity(t *testing.T) {
	base := sluice.Limit{Limit: 2, Period: time.Minute}
	tests := []struct {
		name  string
		reset sluice.Limit
	}{
		{"burst spelled out", sluice.Limit{Limit: 2, Period: time.Minute, Burst: 2}},
		{"algorithm spelled out", sluice.Limit{Algorithm: sluice.TokenBucket, Limit: 2, Period: time.Minute}},
		{"normalized", base.Normalized()},
		{"other numbers, same identity", sluice.Limit{Limit: 5, Period: time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			ctx := context.Background()
			plain := sluice.New(memory.New(), sluice.WithClock(clock))
			cached := sluice.New(memory.New(), sluice.WithClock(clock), sluice.WithDenyCache(0))
			for _, l := range []*sluice.Limiter{plain, cached} {
				for range 3 {
					if _, err := l.Allow(ctx, "k", base); err != nil {
						t.Fatal(err)
					}
				}
				if err := l.Reset(ctx, "k", tt.reset); err != nil {
					t.Fatal(err)
				}
			}
			want, err := plain.Allow(ctx, "k", base)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cached.Allow(ctx, "k", base)
			if err != nil {
				t.Fatal(err)
			}
			if !want.Allowed {
				t.Fatalf("the store itself denies after Reset(%+v): %+v", tt.reset, want)
			}
			if got != want {
				t.Errorf("after Reset(%+v): with the cache %+v, without %+v", tt.reset, got, want)
			}
		})
	}
}

// TestDenyCacheSubMicrosecond: the stores decide at now truncated to
// the microsecond, and the RetryAfter they return counts from there; the
// cache counts it from t0 itself, so with a clock that is not on a whole
// microsecond it denies for up to 1µs after the store admits.
func TestDenyCacheSubMicrosecond(t *testing.T) {
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Limit: 1, Period: time.Second}
	second := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := second.Add(500 * time.Nanosecond)
	clock := func() time.Time { return now }
	ctx := context.Background()
	plain := sluice.New(memory.New(), sluice.WithClock(clock))
	cached := sluice.New(memory.New(), sluice.WithClock(clock), sluice.WithDenyCache(0))
	steps := []time.Time{
		second.Add(500 * time.Nanosecond),                                // admitted
		second.Add(time.Second - time.Microsecond + 500*time.Nanosecond), // denied, RetryAfter 1µs
		second.Add(time.Second + 100*time.Nanosecond),                    // the next window: admitted
	}
	for i, at := range steps {
		now = at
		want, err := plain.Allow(ctx, "k", l)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cached.Allow(ctx, "k", l)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("request %d at %s: with the cache %+v, without %+v", i, at.Format("15:04:05.000000000"), got, want)
		}
	}
}

// gateStore holds the first Take that it is told to hold until released,
// after the memory store it wraps has decided it: a decision in flight.
type gateStore struct {
	sluice.Store
	hold     chan struct{} // closed: hold the next Take after deciding
	decided  chan struct{}
	release  chan struct{}
	holdOnce sync.Once
}

func (s *gateStore) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	rs, err := s.Store.Take(ctx, req)
	select {
	case <-s.hold:
		s.holdOnce.Do(func() {
			close(s.decided)
			<-s.release
		})
	default:
	}
	return rs, err
}

// TestDenyCacheResetRace: a denial decided by the store before a
// Limiter.Reset, but kept in the cache after Reset's second forget, is
// answered after the Reset: the store admits, the cache denies.
func TestDenyCacheResetRace(t *testing.T) {
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Limit: 1, Period: time.Minute}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ctx := context.Background()
	gs := &gateStore{Store: memory.New(), hold: make(chan struct{}), decided: make(chan struct{}), release: make(chan struct{})}
	lim := sluice.New(gs, sluice.WithClock(clock), sluice.WithDenyCache(0))
	if r, err := lim.Allow(ctx, "k", l); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	close(gs.hold)
	done := make(chan sluice.Result)
	go func() {
		r, _ := lim.Allow(ctx, "k", l) // denied by the store, held before keep
		done <- r
	}()
	<-gs.decided
	if err := lim.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	close(gs.release)
	if r := <-done; r.Allowed {
		t.Fatal("the held request should have been denied", r)
	}
	got, err := lim.Allow(ctx, "k", l)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Allowed {
		t.Errorf("after Reset the store admits, the cache answered %+v", got)
	}
}
