//go:build integration

package main

import (
	"context"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/internal/service/envoytest"
	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// TestEnvoyConcurrency is Envoy's pattern for a concurrency limit, as
// examples/envoy/concurrency.yaml configures it, against `sluice serve`
// on Redis with examples/envoy/concurrency-rules.yaml: the descriptor a
// request's start sends takes a slot, the same descriptor with
// is_negative_hits that its stream's end sends (apply_on_stream_done)
// gives one back, with no slot id. Two exports of one key in flight: the
// third is OVER_LIMIT until one ends; one ending twice frees nothing it
// did not take.
func TestEnvoyConcurrency(t *testing.T) {
	b := envoytest.Load(t, "../../examples/envoy/concurrency.yaml")
	var start, done *rlsv3.RateLimitRequest
	for _, r := range b.Routes() {
		if r.GetMatch().GetPrefix() != "/exports" {
			continue
		}
		for _, rl := range envoytest.PerRoute(t, r) {
			req := &rlsv3.RateLimitRequest{Domain: b.RateLimit.Domain, Descriptors: []*rlcommon.RateLimitDescriptor{envoytest.Descriptor(t, rl)}}
			if rl.GetApplyOnStreamDone() {
				done = req
			} else {
				start = req
			}
		}
	}
	if start == nil || done == nil || !done.Descriptors[0].IsNegativeHits || done.Descriptors[0].GetHitsAddend().GetValue() != 1 {
		t.Fatalf("/exports: want a descriptor at the start and one given back at stream done; start %v, done %v", start, done)
	}

	srv := redistest.Start(t)
	d := startServe(t, nil, "--config", "../../examples/envoy/concurrency-rules.yaml", "--redis", "redis://"+srv.Addr)
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(req *rlsv3.RateLimitRequest) (rlsv3.RateLimitResponse_Code, uint32) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode, resp.Statuses[0].GetLimitRemaining()
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for i, want := range []struct {
		req       *rlsv3.RateLimitRequest
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{
		{start, ok, 1},
		{start, ok, 0},
		{start, over, 0}, // two in flight
		{done, ok, 1},    // one ends
		{start, ok, 0},
		{done, ok, 1},
		{done, ok, 2},
		{done, ok, 2}, // nothing held: nothing to free
		{start, ok, 1},
		{start, ok, 0},
		{start, over, 0}, // the extra end freed no third slot
	} {
		if code, rem := ask(want.req); code != want.code || rem != want.remaining {
			t.Errorf("step %d: %v with %d remaining, want %v with %d", i+1, code, rem, want.code, want.remaining)
		}
	}
}
