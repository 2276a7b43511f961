package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// slowPeeker is the memory store whose Peek waits for its context to end.
type slowPeeker struct{ *memory.Store }

func (slowPeeker) Peek(ctx context.Context, _ sluice.Request) ([]sluice.Result, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// noPeek is a memory store that cannot peek.
type noPeek struct{ *memory.Store }

func (noPeek) Peek(context.Context, sluice.Request) ([]sluice.Result, error) {
	return nil, errors.ErrUnsupported
}

// peekingDown is downStore with a Peek that fails too.
type peekingDown struct{ downStore }

func (peekingDown) Peek(context.Context, sluice.Request) ([]sluice.Result, error) {
	return nil, errors.New("connection refused")
}

// TestLimiterPeek: Peek answers what the next AllowParts would, spends
// nothing, and never spends from the store when asked again.
func TestLimiterPeek(t *testing.T) {
	clock := storetest.NewClock()
	lim := sluice.New(memory.New(memory.WithClock(clock.Now)), sluice.WithClock(clock.Now))
	ctx := context.Background()
	l := sluice.PerMinute(3).Using(sluice.FixedWindow)
	for i := range 5 {
		p, err := lim.Peek(ctx, sluice.Part{Key: "k", Limits: []sluice.Limit{l}, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		p2, err := lim.Peek(ctx, sluice.Part{Key: "k", Limits: []sluice.Limit{l}, Cost: 1})
		if err != nil || p2.Result != p.Result {
			t.Fatalf("request %d: a second Peek = %+v, %v; the first %+v", i, p2.Result, err, p.Result)
		}
		got, err := lim.AllowN(ctx, "k", l, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got != p.Result {
			t.Errorf("request %d: Peek = %+v, then AllowN = %+v", i, p.Result, got)
		}
		if want := i < 3; got.Allowed != want {
			t.Errorf("request %d: allowed %v, want %v", i, got.Allowed, want)
		}
	}
	// Cost 0 denied under a lowered limit; a cost above what remains.
	lowered := sluice.PerMinute(2).Using(sluice.FixedWindow)
	if p, err := lim.Peek(ctx, sluice.Part{Key: "k", Limits: []sluice.Limit{lowered}}); err != nil || p.Allowed {
		t.Errorf("Peek at cost 0 with 3 spent of a lowered 2 = %+v, %v; want denied", p.Result, err)
	}
	two := []sluice.Limit{sluice.PerMinute(10).Using(sluice.SlidingLog), sluice.PerHour(8).Using(sluice.GCRA)}
	if _, err := lim.AllowN(ctx, "j", two[1], 5); err != nil {
		t.Fatal(err)
	}
	if p, err := lim.Peek(ctx, sluice.Part{Key: "j", Limits: two, Cost: 6}); err != nil || p.Allowed || p.Binding != 1 || !p.Results[0].Allowed || p.Results[0].Remaining != 10 {
		t.Errorf("Peek of cost 6 under %v = %+v, %v; want denied by the second (3 left), the first reporting 10 left", two, p, err)
	}
}

// TestLimiterPeekErrors: invalid requests are refused as AllowParts
// refuses them; a store without Peek, a failing one and one that does
// not answer in the store timeout give errors, whatever the error policy:
// never the policy's answer.
func TestLimiterPeekErrors(t *testing.T) {
	ctx := context.Background()
	l := sluice.PerMinute(3)
	mem := memory.New()
	for _, tt := range []struct {
		name string
		lim  *sluice.Limiter
		part []sluice.Part
		want error
	}{
		{"no part", sluice.New(mem), nil, sluice.ErrInvalidLimit},
		{"no limit", sluice.New(mem), []sluice.Part{{Key: "k"}}, sluice.ErrInvalidLimit},
		{"cost over capacity", sluice.New(mem), []sluice.Part{{Key: "k", Limits: []sluice.Limit{l}, Cost: 4}}, sluice.ErrInvalidCost},
		{"negative cost", sluice.New(mem), []sluice.Part{{Key: "k", Limits: []sluice.Limit{l}, Cost: -1}}, sluice.ErrInvalidCost},
		{"invalid limit", sluice.New(mem), []sluice.Part{{Key: "k", Limits: []sluice.Limit{{Limit: 1}}}}, sluice.ErrInvalidLimit},
		{"no Peek", sluice.New(noPeek{mem}, sluice.WithErrorPolicy(sluice.AllowOnError)), []sluice.Part{{Key: "k", Limits: []sluice.Limit{l}}}, errors.ErrUnsupported},
		{"timeout", sluice.New(slowPeeker{mem}, sluice.WithStoreTimeout(20*time.Millisecond)), []sluice.Part{{Key: "k", Limits: []sluice.Limit{l}}}, context.DeadlineExceeded},
		{"down, allow", sluice.New(peekingDown{}, sluice.WithErrorPolicy(sluice.AllowOnError)), []sluice.Part{{Key: "k", Limits: []sluice.Limit{l}}}, nil},
		{"down, local", sluice.New(peekingDown{}, sluice.WithErrorPolicy(sluice.LocalOnError(memory.New()))), []sluice.Part{{Key: "k", Limits: []sluice.Limit{l}}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tt.lim.Peek(ctx, tt.part...)
			if err == nil {
				t.Fatalf("Peek = %+v, want an error", r)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Peek error %q, want one wrapping %q", err, tt.want)
			}
		})
	}
}

// TestLimiterPeekAsksStore: Peek asks the store, not the deny cache: after
// a reset behind the Limiter's back (another replica's), the cache still
// denies the key while Peek reports the store's fresh state; and a peek
// is no decision (Takes does not count it).
func TestLimiterPeekAsksStore(t *testing.T) {
	clock := storetest.NewClock()
	mem := memory.New(memory.WithClock(clock.Now))
	counting := &storetest.Counting{Store: mem}
	lim := sluice.New(counting, sluice.WithClock(clock.Now), sluice.WithDenyCache(0))
	ctx := context.Background()
	l := sluice.PerMinute(1)
	for range 2 {
		if _, err := lim.Allow(ctx, "k", l); err != nil {
			t.Fatal(err)
		}
	}
	if err := mem.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	takes := counting.Takes()
	if r, err := lim.Allow(ctx, "k", l); err != nil || r.Allowed || counting.Takes() != takes {
		t.Fatalf("Allow after the store's reset = %+v, %v, %d takes; want the deny cache's denial, no take", r, err, counting.Takes()-takes)
	}
	p, err := lim.Peek(ctx, sluice.Part{Key: "k", Limits: []sluice.Limit{l}, Cost: 1})
	if err != nil || !p.Allowed || p.Remaining != 0 {
		t.Errorf("Peek after the store's reset = %+v, %v; want the store's: allowed, 0 left after it", p.Result, err)
	}
	if counting.Peeks() != 1 || counting.Takes() != takes {
		t.Errorf("Peek reached the store %d times and took %d times; want 1 and 0", counting.Peeks(), counting.Takes()-takes)
	}
}
