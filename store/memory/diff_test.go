package memory

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/longkey"
)

// TestMatchesUnboundedStore: with room for every key, the bounded store
// decides every request, and reports every TTL, exactly as the unbounded
// store it replaced (ref_test.go), over random multi-part, multi-limit
// requests on a key space that grows and shrinks the shards' tables, with
// resets, sweeps, limits whose Limit or Burst changes, long keys, a short
// key equal to a long key's hash, a clock that steps back by less than the
// minute of grace, and hashes that collide.
func TestMatchesUnboundedStore(t *testing.T) {
	long := strings.Repeat("L", 200)
	keys := []string{"a", "b", "", long, long + "2", longkey.Bound(long)}
	limits := [][]sluice.Limit{ // variants of one identity each
		{sluice.PerMinute(7).Using(sluice.FixedWindow), sluice.PerMinute(3).Using(sluice.FixedWindow)},
		{sluice.PerMinute(5).Using(sluice.SlidingWindow)},
		{sluice.PerSecond(4).Using(sluice.SlidingLog), sluice.PerSecond(2).Using(sluice.SlidingLog)},
		{sluice.PerMinute(7).Using(sluice.TokenBucket).WithBurst(3), sluice.PerMinute(5).Using(sluice.TokenBucket).WithBurst(9)},
		{sluice.PerMinute(7).Using(sluice.GCRA).WithBurst(3), sluice.PerMinute(12).Using(sluice.GCRA)},
		{sluice.PerMinute(7).Using(sluice.GCRA).WithBurst(3).Named("x")},
		{sluice.Per(7, time.Minute+time.Microsecond).Using(sluice.FixedWindow)},
		{sluice.PerHour(20).Using(sluice.SlidingLog).Named(strings.Repeat("n", 300))},
	}
	for _, c := range []struct {
		name   string
		mask   uint64
		shards int
		seed   uint64
		steps  int
	}{
		{"hashes", ^uint64(0), 4, 1, 30_000},
		{"one shard", ^uint64(0), 1, 2, 30_000},
		{"four hashes", 3, 2, 3, 20_000},
		{"one hash", 0, 1, 4, 8_000}, // one run of slots: slow
	} {
		t.Run(c.name, func(t *testing.T) {
			hashMask = c.mask
			defer func() { hashMask = ^uint64(0) }()
			now := time.Unix(1_700_000_000, 0)
			latest := now
			clock := func() time.Time { return now }
			got := New(WithClock(clock), WithShards(c.shards), WithCapacity(1<<20))
			want := refNew(refWithClock(clock), refWithShards(c.shards))
			rng := rand.New(rand.NewPCG(c.seed, 99))
			ctx := context.Background()
			space := 1
			key := func() string {
				if rng.IntN(3) == 0 {
					return keys[rng.IntN(len(keys))]
				}
				// a key space that comes and goes: tables grow, empty
				// and are rebuilt
				return "k" + strconv.Itoa(rng.IntN(space))
			}
			steps := c.steps
			if testing.Short() {
				steps /= 6
			}
			for step := range steps {
				if step%5000 == 0 { // a new key space, and often a jump
					space = []int{30, 300, 6000}[rng.IntN(3)]
					if rng.IntN(2) == 0 {
						now = now.Add(time.Duration(rng.Int64N(int64(5 * time.Minute))))
					}
				}
				switch r := rng.IntN(100); {
				case r < 2: // back, to no more than 50s before the latest instant
					now = latest.Add(-time.Duration(rng.Int64N(int64(50 * time.Second))))
				case r < 3:
					now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
				case r < 40:
					now = now.Add(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
				}
				if now.After(latest) {
					latest = now
				}
				switch r := rng.IntN(100); {
				case r < 2:
					k, l := key(), limits[rng.IntN(len(limits))][0]
					if err1, err2 := got.Reset(ctx, k, l), want.Reset(ctx, k, l); err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
				case r < 3:
					got.Sweep()
					want.Sweep()
				case r < 10:
					k, l := key(), limits[rng.IntN(len(limits))][0]
					a, err1 := got.TTL(ctx, k, l)
					b, err2 := want.TTL(ctx, k, l)
					if err1 != nil || err2 != nil || a != b {
						t.Fatalf("step %d: TTL(%q, %s) = %v, %v; unbounded store %v, %v", step, k, l, a, err1, b, err2)
					}
				default:
					var req sluice.Request
					used := map[string]map[int]bool{}
					for range 1 + rng.IntN(3) {
						p := sluice.Part{Key: key(), Cost: rng.IntN(3)}
						if used[p.Key] == nil {
							used[p.Key] = map[int]bool{}
						}
						for range 1 + rng.IntN(3) {
							j := rng.IntN(len(limits))
							if used[p.Key][j] {
								continue
							}
							used[p.Key][j] = true
							p.Limits = append(p.Limits, limits[j][rng.IntN(len(limits[j]))])
						}
						if len(p.Limits) > 0 {
							req.Parts = append(req.Parts, p)
						}
					}
					if rng.IntN(2) == 0 {
						req.Now = now
					}
					a, err1 := got.Take(ctx, req)
					b, err2 := want.Take(ctx, req)
					if err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
					for i := range a {
						if a[i] != b[i] {
							t.Fatalf("step %d: result %d of %+v = %+v, unbounded store %+v", step, i, req, a[i], b[i])
						}
					}
				}
			}
			if got.Evictions() != 0 {
				t.Errorf("Evictions() = %d, want 0", got.Evictions())
			}
		})
	}
}
