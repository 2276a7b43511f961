package envoy

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/store/memory"
)

// benchService returns a Service on the memory store under
// testdata/upstream, observed and its store instrumented by package
// metrics as sluice serve wires them.
func benchService(b *testing.B) *Service {
	b.Helper()
	cfg, err := LoadConfig("testdata/upstream")
	if err != nil {
		b.Fatal(err)
	}
	m := metrics.New()
	return NewService(sluice.New(memory.New(), sluice.WithHooks(m.Hooks())), cfg, WithLogger(slog.New(slog.DiscardHandler)),
		WithObserver(m.Decision), WithUnknownDomain(m.UnknownDomain))
}

// benchRequests returns requests of n descriptors for 1000 addresses.
func benchRequests(n int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		k := "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
		req := &rlsv3.RateLimitRequest{Domain: "basic"}
		for j := range n {
			key := []string{"key1", "metered", "named"}[j]
			req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: k}}})
		}
		reqs[i] = req
	}
	return reqs
}

// BenchmarkShouldRateLimit measures the Service's own work per request,
// in process on the memory store (no gRPC, no network), observed by
// package metrics as in sluice serve, for one descriptor and for three:
//
//	go test -run '^$' -bench ShouldRateLimit -benchmem ./envoy/
func BenchmarkShouldRateLimit(b *testing.B) {
	svc := benchService(b)
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"-descriptors", func(b *testing.B) {
			reqs := benchRequests(n)
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

// BenchmarkShouldRateLimitGRPC measures a whole call over gRPC on
// loopback, client and server in this process (both counted), one
// descriptor, from one caller and from parallel ones:
//
//	go test -run '^$' -bench ShouldRateLimitGRPC -benchmem ./envoy/
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	Register(g, benchService(b))
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	reqs := benchRequests(1)
	call := func(b *testing.B, i int) {
		resp, err := client.ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
		if err != nil || len(resp.GetStatuses()) != 1 {
			b.Fatal(resp, err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			call(b, i)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				call(b, i)
			}
		})
	})
}
