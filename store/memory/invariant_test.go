package memory

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// checkShard fails t unless sh is consistent: its list runs through n
// entries both ways, each found through the table under its own key, the
// table holds exactly those, the free list holds every other node handed
// out, and no shard holds more than its capacity.
func checkShard(t *testing.T, sh *shard) {
	t.Helper()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	seen := map[int32]bool{}
	prev := int32(0)
	for i := sh.at(0).next; i != 0; i = sh.at(i).next {
		if seen[i] || len(seen) > sh.n {
			t.Fatalf("the list from the head loops or runs past %d entries", sh.n)
		}
		seen[i] = true
		n := sh.at(i)
		if n.prev != prev {
			t.Fatalf("node %d: prev %d, want %d", i, n.prev, prev)
		}
		if n.key == "" {
			t.Fatalf("node %d in the list has no key", i)
		}
		if got := sh.find([]byte(n.key), entryHashString(sh.seed, n.key)); got != i {
			t.Fatalf("node %d: its key finds node %d", i, got)
		}
		prev = i
	}
	if sh.at(0).prev != prev || len(seen) != sh.n {
		t.Fatalf("list: %d entries ending at %d, head.prev %d; n = %d", len(seen), prev, sh.at(0).prev, sh.n)
	}
	slots := 0
	for _, s := range sh.tab {
		if s != 0 {
			slots++
			if !seen[int32(uint32(s))] {
				t.Fatalf("slot %x names node %d, not in the list", s, int32(uint32(s)))
			}
		}
	}
	if slots != sh.n || sh.n*4 > len(sh.tab)*3 {
		t.Fatalf("table: %d of %d slots full, n = %d", slots, len(sh.tab), sh.n)
	}
	free := 0
	for i := sh.free; i != 0; i = sh.at(i).next {
		if seen[i] || free > int(sh.used) {
			t.Fatalf("free node %d is in the list, or the free list loops", i)
		}
		free++
	}
	if free+sh.n+1 != int(sh.used) {
		t.Fatalf("%d free + %d held + head != %d nodes handed out", free, sh.n, sh.used)
	}
	if sh.n > sh.cap {
		t.Fatalf("%d entries held, capacity %d", sh.n, sh.cap)
	}
}

// TestShardInvariants: under concurrent random decisions, resets, sweeps
// and TTLs on a small store (evicting all the time, across shards and
// with colliding hashes), every shard stays consistent, and a multi-part
// decision that locks several shards never deadlocks.
func TestShardInvariants(t *testing.T) {
	limits := []sluice.Limit{
		sluice.PerMinute(3).Using(sluice.FixedWindow),
		sluice.PerSecond(2).Using(sluice.SlidingLog),
		sluice.PerMinute(5).Using(sluice.TokenBucket).Named("b"),
		sluice.PerMinute(5).Using(sluice.GCRA).Named("g"),
	}
	for _, c := range []struct {
		name           string
		mask           uint64
		shards, capac  int
		workers, steps int
		jump           time.Duration // the clock jumps ahead by up to jump
		perMille       int           // in perMille steps of 1000
		keys           int
	}{
		{"four shards", ^uint64(0), 4, 4 * 64, 4, 4000, 40 * time.Second, 30, 2000},
		{"colliding", 7, 2, 2 * 64, 4, 4000, 40 * time.Second, 30, 2000},
		{"one shard of 5", ^uint64(0), 1, 5, 2, 4000, 40 * time.Second, 30, 2000},
		{"shrinking", ^uint64(0), 2, 2 * 1024, 4, 4000, 5 * time.Minute, 1, 20_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			hashMask = c.mask
			defer func() { hashMask = ^uint64(0) }()
			var mu sync.Mutex
			now := time.Unix(1_700_000_000, 0)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			s := New(WithClock(clock), WithShards(c.shards), WithCapacity(c.capac))
			var wg sync.WaitGroup
			for w := range c.workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 5))
					ctx := context.Background()
					key := func() string { return "k" + strconv.Itoa(rng.IntN(1+rng.IntN(c.keys))) }
					for range c.steps {
						if rng.IntN(1000) < c.perMille {
							mu.Lock()
							now = now.Add(time.Duration(rng.Int64N(int64(c.jump))))
							mu.Unlock()
						}
						switch r := rng.IntN(100); {
						case r < 2:
							_ = s.Reset(ctx, key(), limits[rng.IntN(len(limits))])
						case r < 3:
							s.Sweep()
						case r < 5:
							_, _ = s.TTL(ctx, key(), limits[rng.IntN(len(limits))])
						default:
							var req sluice.Request
							for range 1 + rng.IntN(3) {
								j := rng.IntN(len(limits))
								req.Parts = append(req.Parts, sluice.Part{Key: key(), Limits: limits[j : j+1+rng.IntN(len(limits)-j)], Cost: rng.IntN(3)})
							}
							if _, err := s.Take(ctx, req); err != nil {
								t.Error(err)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			// One decision more in each shard: back within its capacity.
			for i := range 64 {
				if _, err := s.Take(context.Background(), sluice.Request{Parts: []sluice.Part{{Key: "last" + strconv.Itoa(i), Limits: limits[:1], Cost: 1}}}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range s.shards {
				checkShard(t, &s.shards[i])
			}
			if s.Evictions() == 0 {
				t.Errorf("Evictions() = 0: the run did not fill the store")
			}
		})
	}
}

// TestEntryKeyFlags: the first byte of an entry key holds an algorithm's
// index in sluice.Algorithms plus one in its low three bits, below the
// flags: an eighth algorithm would need a wider field, or two identities
// would share a key.
func TestEntryKeyFlags(t *testing.T) {
	if n := len(sluice.Algorithms); n+1 > 1<<3 {
		t.Fatalf("%d algorithms do not fit in appendEntryKey's three bits", n)
	}
}
