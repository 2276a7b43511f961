package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/lease"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestPeek: a leased request that the replica's lease serves is peeked at
// from the lease, as Take answers it, spending nothing; any other request
// is the backing store's Peek, which counts the leased block as spent;
// and a backing store without Peek fails with errors.ErrUnsupported.
func TestPeek(t *testing.T) {
	ctx := context.Background()
	now := storetest.Epoch.Add(10 * time.Second)
	l := sluice.PerMinute(100).Using(sluice.FixedWindow)
	backing := memory.New()
	s, err := lease.New(backing, lease.Block(10))
	if err != nil {
		t.Fatal(err)
	}
	take(t, s, one("k", l, 1, now)) // leases 10, holds 9
	for i, req := range []sluice.Request{one("k", l, 1, now), one("k", l, 8, now)} {
		rs, err := s.Peek(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := take(t, s, req); rs[0] != got {
			t.Errorf("request %d: Peek = %+v, Take = %+v", i, rs[0], got)
		}
	}
	// The lease is spent (10 of 10): the next peeks are the backing
	// store's, which counts the block.
	rs, err := s.Peek(ctx, one("k", l, 0, now))
	if err != nil || rs[0].Remaining != 90 {
		t.Errorf("Peek at cost 0 after the block = %+v, %v; want the backing store's 90 left", rs, err)
	}
	two := sluice.Request{Parts: []sluice.Part{{Key: "k", Limits: []sluice.Limit{l, sluice.PerHour(1000)}, Cost: 1}}, Now: now}
	rs, err = s.Peek(ctx, two)
	if err != nil || rs[0].Remaining != 89 || rs[1].Remaining != 999 {
		t.Errorf("Peek of two limits = %+v, %v; want the backing store's 89 and 999 left", rs, err)
	}
	if got := take(t, backing, one("k", l, 0, now)); got.Remaining != 90 {
		t.Errorf("the peeks spent: the backing store has %d left, want 90", got.Remaining)
	}

	hidden, err := lease.New(storetest.TakeOnly(backing))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hidden.Peek(ctx, one("k", l, 1, now)); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Peek over a backing store without Peek: %v, want errors.ErrUnsupported", err)
	}
}
