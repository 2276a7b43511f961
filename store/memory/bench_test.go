package memory_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// benchKeys is the number of distinct keys the benchmarks cycle through.
const benchKeys = 1000

var keys = func() []string {
	k := make([]string, benchKeys)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// BenchmarkAllow measures one admitted decision per algorithm, from one
// goroutine and from GOMAXPROCS goroutines:
//
//	go test -run '^$' -bench Allow -benchmem ./store/memory/
func BenchmarkAllow(b *testing.B) {
	for _, a := range sluice.Algorithms {
		l := benchLimit(a)
		b.Run(string(a)+"/serial", func(b *testing.B) {
			lim := sluice.New(memory.New())
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := lim.Allow(ctx, keys[i%benchKeys], l); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(string(a)+"/parallel", func(b *testing.B) {
			lim := sluice.New(memory.New())
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1)) * 7919
				for pb.Next() {
					i++
					if _, err := lim.Allow(ctx, keys[i%benchKeys], l); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// benchLimit admits everything a benchmark sends over 1000 keys: 1e6 per
// second per key (sliding_log: its maximum, 10000 per second).
func benchLimit(a sluice.Algorithm) sluice.Limit {
	if a == sluice.SlidingLog {
		return sluice.PerSecond(sluice.MaxLogLimit).Using(a)
	}
	return sluice.PerSecond(1_000_000).Using(a)
}

// BenchmarkNewKeys measures a flood: every decision a key never seen
// before, into a store of DefaultCapacity that is full after 524,288 of
// them and evicts from then on:
//
//	go test -run '^$' -bench NewKeys -benchtime 1000000x -benchmem ./store/memory/
func BenchmarkNewKeys(b *testing.B) {
	s := memory.New()
	l := sluice.PerMinute(100).Named("search")
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := sluice.Request{Parts: []sluice.Part{{Key: "k" + strconv.Itoa(i), Limits: []sluice.Limit{l}, Cost: 1}}, Now: storetest.Epoch}
		if _, err := s.Take(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkManyKeys measures admitted gcra decisions through the public
// API over 1,048,576 distinct keys (a store sized to hold them all, every
// key decided once before timing), each call a key drawn at random, from
// one goroutine and from GOMAXPROCS goroutines: parallel against serial
// ns/op is how throughput scales with cores when the state does not fit
// in a cache. It also reports the live heap per key of the full store
// (B/key) and, on Linux, the growth of the process's resident memory per
// key while the store filled (RSS-B/key: the heap with the collector's
// headroom, GOGC):
//
//	go test -run '^$' -bench ManyKeys -benchmem -benchtime 1000000x ./store/memory/
func BenchmarkManyKeys(b *testing.B) {
	const n = 1 << 20
	many := make([]string, n)
	for i := range many {
		many[i] = "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	l := benchLimit(sluice.GCRA)
	ctx := context.Background()
	before, rssBefore := liveHeap(), rss()
	s := memory.New(memory.WithCapacity(2 * n))
	lim := sluice.New(s)
	for _, k := range many {
		if r, err := lim.Allow(ctx, k, l); err != nil || !r.Allowed {
			b.Fatal(r, err)
		}
	}
	rssPerKey := float64(rss()-rssBefore) / n
	perKey := float64(liveHeap()-before) / n
	// next draws key indexes from a xorshift sequence of its own.
	next := func(x *uint64) int {
		*x ^= *x << 13
		*x ^= *x >> 7
		*x ^= *x << 17
		return int(*x % n)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		x := uint64(88172645463325252)
		for b.Loop() {
			if _, err := lim.Allow(ctx, many[next(&x)], l); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(perKey, "B/key")
		if rssBefore > 0 {
			b.ReportMetric(rssPerKey, "RSS-B/key")
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var seeds atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			x := seeds.Add(1) * 0x9E3779B97F4A7C15
			for pb.Next() {
				if _, err := lim.Allow(ctx, many[next(&x)], l); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(perKey, "B/key")
	})
	if got := s.Len(); got != n {
		b.Errorf("the store holds %d entries, want all %d keys", got, n)
	}
}

// rss returns the resident memory of the process in bytes, from
// /proc/self/statm, or 0 where there is none.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
