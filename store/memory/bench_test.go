package memory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/storetest"
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
