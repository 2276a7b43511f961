package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestConformanceCollisions: with four distinct hashes in all, most keys
// share their hash with others, and the shards' tables probe long runs of
// slots; the store decides exactly as ever.
func TestConformanceCollisions(t *testing.T) {
	memory.CollideHashes(t, 3)
	storetest.Run(t, func(t *testing.T, now func() time.Time) sluice.Store {
		return memory.New(memory.WithClock(now), memory.WithShards(4))
	})
}

// TestCollisionsEvictAndShrink: entries whose hashes collide (two hashes
// in all: one run of slots) are evicted, expired, swept and moved by a
// rebuild like any other.
func TestCollisionsEvictAndShrink(t *testing.T) {
	memory.CollideHashes(t, 1)
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithShards(1), memory.WithCapacity(1000))
	l := sluice.PerMinute(1).Using(sluice.FixedWindow)
	ctx := context.Background()
	take := func(key string) bool {
		rs, err := s.Take(ctx, sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0].Allowed
	}
	for i := range 3000 {
		take("k" + strconv.Itoa(i))
	}
	if n, _, _ := s.Tables(0); s.Len() != 1000 || s.Evictions() != 2000 || n != 1000 {
		t.Fatalf("after 3000 keys into 1000: Len %d, Evictions %d, %d in the table; want 1000, 2000, 1000", s.Len(), s.Evictions(), n)
	}
	for i := 2000; i < 3000; i++ { // the last 1000 are held: denied
		if take("k" + strconv.Itoa(i)) {
			t.Fatalf("key %d, held, admitted a second request", i)
		}
	}
	clock.Set(2*time.Minute + time.Second)
	take("new") // the store is used: some expired entries go
	for i := 2500; i < 2600; i++ {
		take("k" + strconv.Itoa(i)) // expired: a new window, admitted and kept
	}
	if s.Sweep(); s.Len() != 101 {
		t.Fatalf("Sweep left %d entries, want the 101 live ones", s.Len())
	}
	if n, slots, nodes := s.Tables(0); n != 101 || slots > 256 || nodes > 200 {
		t.Errorf("after Sweep: %d in a table of %d, %d nodes; want 101 entries in a rebuilt shard", n, slots, nodes)
	}
	for i := 2500; i < 2600; i++ {
		if take("k" + strconv.Itoa(i)) {
			t.Fatalf("key %d admitted a second request in its window after the rebuild", i)
		}
	}
	if !take("k2600") {
		t.Errorf("a key swept away was denied, want admitted")
	}
}
