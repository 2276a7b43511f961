package sluice_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

var benchKeys = func() []string {
	k := make([]string, 1000)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// BenchmarkLimiter measures what the Limiter adds to a store's decision,
// over the memory store: direct (ReturnErrors, no breaker: nothing between
// the Limiter and the store), breaker (an error policy, hence the default
// circuit breaker and store timeout), a request of two parts, and a
// reservation of cost 2 settled at 1:
//
//	go test -run '^$' -bench Limiter -benchmem .
func BenchmarkLimiter(b *testing.B) {
	limit := sluice.PerSecond(1_000_000)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		opts []sluice.Option
	}{
		{"direct", nil},
		{"breaker", []sluice.Option{sluice.WithErrorPolicy(sluice.AllowOnError)}},
	} {
		lim := sluice.New(memory.New(), bc.opts...)
		b.Run(bc.name+"/allow", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := lim.Allow(ctx, benchKeys[i%len(benchKeys)], limit); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/allow/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if _, err := lim.Allow(ctx, benchKeys[i%len(benchKeys)], limit); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run(bc.name+"/reserve+settle", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r, err := lim.Reserve(ctx, benchKeys[i%len(benchKeys)], limit, 2)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.Settle(ctx, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/parts", func(b *testing.B) {
			b.ReportAllocs()
			parts := []sluice.Part{{Limits: []sluice.Limit{limit}, Cost: 1}, {Key: "global", Limits: []sluice.Limit{limit.Named("g")}, Cost: 1}}
			for i := 0; b.Loop(); i++ {
				parts[0].Key = benchKeys[i%len(benchKeys)]
				if _, err := lim.AllowParts(ctx, parts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
