//go:build integration

package lease_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/lease"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
)

// BenchmarkBackingCalls decides one hot key that never runs out, on the
// store's own clock, directly on a memory store and through lease Stores
// of blocks 1, 10 and 100 over it, and reports backing-store Take calls
// per decision (backing-calls/op): about 1/B.
func BenchmarkBackingCalls(b *testing.B) {
	l := sluice.PerDay(1 << 30).Using(sluice.FixedWindow)
	for _, blk := range []int{0, 1, 10, 100} {
		name := "direct"
		if blk > 0 {
			name = "block=" + strconv.Itoa(blk)
		}
		for _, par := range []bool{false, true} {
			n := name
			if par {
				n += "/parallel"
			}
			b.Run(n, func(b *testing.B) {
				c := &counting{Store: memory.New()}
				lim := sluice.New(leasing(b, c, blk))
				ctx := context.Background()
				decide := func() {
					r, err := lim.Allow(ctx, "hot", l)
					if err != nil || !r.Allowed {
						b.Fatalf("%+v, %v", r, err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				if par {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							decide()
						}
					})
				} else {
					for range b.N {
						decide()
					}
				}
				b.ReportMetric(float64(c.takes.Load())/float64(b.N), "backing-calls/op")
			})
		}
	}
}

// BenchmarkRedisHotKey decides one hot key that never runs out from 256
// goroutines over one real redis-server (GOMAXPROCS × 128), directly and
// through lease Stores of blocks 10 and 100, and reports backing-store
// calls per decision. Time per decision on a shared machine is noise;
// backing-calls/op is not.
func BenchmarkRedisHotKey(b *testing.B) {
	srv := redistest.Start(b)
	rs, err := redis.Open("redis://" + srv.Addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rs.Close)
	l := sluice.PerDay(1 << 30).Using(sluice.GCRA)
	for _, blk := range []int{0, 10, 100} {
		name := "direct"
		if blk > 0 {
			name = "block=" + strconv.Itoa(blk)
		}
		b.Run(name, func(b *testing.B) {
			c := &counting{Store: rs}
			lim := sluice.New(leasing(b, c, blk))
			ctx := context.Background()
			key := "hot-" + name
			b.ReportAllocs()
			b.SetParallelism(128)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r, err := lim.Allow(ctx, key, l)
					if err != nil || !r.Allowed {
						b.Errorf("%+v, %v", r, err)
						return
					}
				}
			})
			b.ReportMetric(float64(c.takes.Load())/float64(b.N), "backing-calls/op")
		})
	}
}

// maxShardsForBench keeps every shard room for one lease.
const maxShardsForBench = 16

// BenchmarkLeaseMemory holds b.N leases (keys of 16 bytes) and reports the
// heap they take per lease (bytes/lease), map and key strings included.
func BenchmarkLeaseMemory(b *testing.B) {
	l := sluice.PerMinute(100).Using(sluice.FixedWindow)
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%09d", i)
	}
	backing := memory.New()
	for _, k := range keys { // the backing store's own memory is not counted
		if _, err := backing.Take(context.Background(), sluice.Request{Parts: []sluice.Part{{Key: k, Limits: []sluice.Limit{l}}}}); err != nil {
			b.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := lease.New(backing, lease.MaxLeases(2*b.N+maxShardsForBench)) // shards fill unevenly
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for _, k := range keys {
		if _, err := s.Take(context.Background(), sluice.Request{Parts: []sluice.Part{{Key: k, Limits: []sluice.Limit{l}, Cost: 1}}}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Len() != b.N {
		b.Fatalf("%d leases held, want %d", s.Len(), b.N)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "bytes/lease")
	runtime.KeepAlive(s)
	runtime.KeepAlive(keys)
}

// leasing returns a lease store of blocks of blk over c, or c itself when
// blk is 0 (no leasing).
func leasing(b *testing.B, c *counting, blk int) sluice.Store {
	if blk == 0 {
		return c
	}
	s, err := lease.New(c, lease.Block(blk))
	if err != nil {
		b.Fatal(err)
	}
	return s
}
