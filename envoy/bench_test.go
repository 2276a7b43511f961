package envoy

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// BenchmarkShouldRateLimit measures the Service's own work per request,
// in process on the memory store (no gRPC, no network), for one
// descriptor and for three:
//
//	go test -run '^$' -bench ShouldRateLimit -benchmem ./envoy/
func BenchmarkShouldRateLimit(b *testing.B) {
	cfg, err := LoadConfig("testdata/upstream")
	if err != nil {
		b.Fatal(err)
	}
	svc := NewService(sluice.New(memory.New()), cfg, WithLogger(slog.New(slog.DiscardHandler)))
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"-descriptors", func(b *testing.B) {
			reqs := make([]*rlsv3.RateLimitRequest, len(keys))
			for i, k := range keys {
				req := &rlsv3.RateLimitRequest{Domain: "basic"}
				for j := range n {
					key := []string{"key1", "metered", "named"}[j]
					req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: k}}})
				}
				reqs[i] = req
			}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
