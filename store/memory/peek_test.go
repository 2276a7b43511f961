package memory_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestPeekNoUse: a peek creates no entry, evicts none and does not count
// as a use: in a full store, the least recently decided key is the one
// forgotten for a new key, however often it was peeked at, and peeks at
// keys never seen leave the store as it was.
func TestPeekNoUse(t *testing.T) {
	clock := storetest.NewClock()
	store := memory.New(memory.WithClock(clock.Now), memory.WithShards(1), memory.WithCapacity(64))
	lim := sluice.New(store, sluice.WithClock(clock.Now))
	ctx := context.Background()
	l := sluice.PerMinute(10).Using(sluice.FixedWindow)
	peek := func(key string) sluice.Result {
		t.Helper()
		r, err := lim.Peek(ctx, sluice.Part{Key: key, Limits: []sluice.Limit{l}, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return r.Result
	}
	for i := range store.Capacity() {
		if _, err := lim.Allow(ctx, "k"+strconv.Itoa(i), l); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		peek("k0")
		peek("never-" + strconv.Itoa(i))
	}
	if store.Len() != store.Capacity() || store.Evictions() != 0 {
		t.Fatalf("after peeks: %d entries, %d evictions; want %d and 0", store.Len(), store.Evictions(), store.Capacity())
	}
	if _, err := lim.Allow(ctx, "new", l); err != nil {
		t.Fatal(err)
	}
	if r := peek("k0"); r.Remaining != 9 {
		t.Errorf("k0, peeked at but least recently decided: %d left after one more, want 9 (forgotten for the new key)", r.Remaining)
	}
	if r := peek("k1"); r.Remaining != 8 {
		t.Errorf("k1: %d left after one more, want 8 (kept)", r.Remaining)
	}
}

// TestPeekConcurrent: peeks at the keys being decided, of one limit (the
// path of TakeOne) and of two, run beside the decisions (under -race: no
// data race) and spend nothing: the decisions admit exactly the limit.
func TestPeekConcurrent(t *testing.T) {
	store := memory.New(memory.WithShards(2))
	lim := sluice.New(store)
	ctx := context.Background()
	one := []sluice.Limit{sluice.PerHour(50).Using(sluice.SlidingLog)}
	two := []sluice.Limit{sluice.PerHour(50).Using(sluice.TokenBucket), sluice.PerDay(1000).Using(sluice.FixedWindow)}
	var admitted [2]atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 40 {
				for j, ls := range [][]sluice.Limit{one, two} {
					key := "k" + strconv.Itoa(j)
					if g%2 == 0 {
						r, err := lim.AllowParts(ctx, sluice.Part{Key: key, Limits: ls, Cost: 1})
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted[j].Add(1)
						}
						continue
					}
					if _, err := lim.Peek(ctx, sluice.Part{Key: key, Limits: ls, Cost: 1 + i%3}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for j := range admitted {
		if n := admitted[j].Load(); n != 50 {
			t.Errorf("limits %d: %d admitted of 80 decisions beside peeks, want 50", j, n)
		}
	}
}
