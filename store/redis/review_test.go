package redis_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	sluiceredis "github.com/sluice-go/sluice/store/redis"
)

// TestCoalesceKeepsNoRequestPastTake: a decision whose caller leaves
// (its context ends) after its batch was sent returns at once, and
// the Limiter then reuses the memory of its request (onePool: "Nothing
// keeps a request past the store call that decides it"). The batch's
// sender must not read that request afterwards; under -race, reading
// the departed caller's limits when the batch's reply comes back
// (takeBatch -> results(cl.g.limits, ...)) is a data race with the
// Limiter clearing them.
func TestCoalesceKeepsNoRequestPastTake(t *testing.T) {
	srv := redistest.Start(t)
	t.Cleanup(srv.Stop)
	admin := newRueidis(t, srv.Addr)
	store := sluiceredis.FromRueidis(newRueidis(t, srv.Addr), prefix())
	lim := sluice.New(store)
	ctx := context.Background()
	if err := admin.Do(ctx, admin.B().ClientPause().Timeout(60000).Write().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	unpause := func() {
		if err := admin.Do(ctx, admin.B().ClientUnpause().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// Four calls in flight, blocked by the pause, whose callers leave
	// later: that ends their calls and sends the queue as one batch.
	inCtx, inCancel := context.WithCancel(ctx)
	defer inCancel()
	inflight := make(chan error, sluiceredis.MaxInFlight)
	for i := range sluiceredis.MaxInFlight {
		go func() {
			_, err := store.Take(inCtx, one("inflight"+strconv.Itoa(i), 1))
			inflight <- err
		}()
	}
	eventually(t, "the calls in flight", func() bool { busy, _ := store.Lanes(); return busy == sluiceredis.MaxInFlight })

	// x decides through a Limiter (its pooled request), y directly.
	xCtx, xCancel := context.WithCancel(ctx)
	defer xCancel()
	x := make(chan error, 1)
	go func() {
		_, err := lim.Allow(xCtx, "x", window)
		x <- err
	}()
	eventually(t, "x queued", func() bool { _, q := store.Lanes(); return q == 1 })
	y := queue(t, ctx, store, 1, "y")[0]

	inCancel()
	for i := range sluiceredis.MaxInFlight {
		if err := within(t, "in flight", inflight); !errors.Is(err, context.Canceled) {
			t.Fatalf("in flight %d: %v, want context.Canceled", i, err)
		}
	}
	// The queue went as one batch, still blocked by the pause.
	eventually(t, "the batch sent", func() bool { busy, q := store.Lanes(); return busy == 1 && q == 0 })

	xCancel()
	if err := within(t, "x", x); !errors.Is(err, context.Canceled) {
		t.Fatalf("x after its batch was sent: %v, want context.Canceled", err)
	}
	// x's Limiter has put its request back in the pool; the reply of
	// the batch arrives now.
	unpause()
	if err := within(t, "y", y); err != nil {
		t.Errorf("y: %v", err)
	}
	eventually(t, "the lane idle", func() bool { busy, q := store.Lanes(); return busy == 0 && q == 0 })
}
