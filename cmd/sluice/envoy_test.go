//go:build integration

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// TestServeEnvoy: `sluice serve` given a file written for
// envoyproxy/ratelimit answers Envoy's ShouldRateLimit over gRPC, on
// Redis.
func TestServeEnvoy(t *testing.T) {
	srv := redistest.Start(t)
	cfg := writeFile(t, `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: database
    rate_limit:
      unit: minute
      requests_per_unit: 1
      algorithm: sliding_log
`)
	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", cfg, "--grpc-listen", "127.0.0.1:0", "--reload-interval", "100ms")
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("gRPC address %q: %v", d.grpc, err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(db string) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
			Domain: "mongo_cps",
			Descriptors: []*rlcommon.RateLimitDescriptor{{
				Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "database", Value: db}},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp := ask("users")
		if resp.OverallCode != want {
			t.Fatalf("users request %d: %v, want %v", i+1, resp.OverallCode, want)
		}
		st := resp.Statuses[0]
		if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Errorf("users status: %v", st)
		}
	}
	// A health check on the same server is no decision: not timed at
	// the grpc door.
	hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hcancel()
	if _, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	// The decisions reach the metrics.
	text := scrapeMetrics(t, d)
	for _, want := range []string{
		`sluice_decisions_total{outcome="allowed",rule="mongo_cps.database_users"} 3`,
		`sluice_decisions_total{outcome="denied",rule="mongo_cps.database_users"} 1`,
		// Every limit's series from the start, overrides' too, and the
		// four calls timed at the grpc door (not the health check).
		`sluice_decisions_total{outcome="denied",rule="mongo_cps.database"} 0`,
		`sluice_decisions_total{outcome="allowed",rule="override.mongo_cps"} 0`,
		`sluice_decision_duration_seconds_count{door="grpc"} 4`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Any other database: 1 per minute each, counted per value.
	defer func() {
		// The file changes: the service takes it without a restart.
		if err := os.WriteFile(cfg, []byte("domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, func() error {
			if n := ask("users").Statuses[0].CurrentLimit.GetRequestsPerUnit(); n != 10 {
				return fmt.Errorf("the Envoy file was not reloaded: users limit %d, want 10", n)
			}
			return nil
		})
	}()
	for _, db := range []string{"orders", "carts"} {
		if a, b := ask(db).OverallCode, ask(db).OverallCode; a != rlsv3.RateLimitResponse_OK || b != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%s: %v then %v, want OK then OVER_LIMIT", db, a, b)
		}
	}
}

// TestServeEnvoyRules: with a sluice policy file, Envoy's descriptors name
// the rule ("rule" entry) and the client (the other entries).
func TestServeEnvoyRules(t *testing.T) {
	cfg := writeFile(t, `
rules:
  - {name: login, match: POST /login, key: ip, limit: 1, period: 1m}
`)
	d := startServe(t, nil, "--config", cfg)
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("gRPC address %q: %v", d.grpc, err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "edge",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{
				{Key: "rule", Value: "login"}, {Key: "remote_address", Value: "203.0.113.7"},
			}}},
		})
		if err != nil || resp.OverallCode != want {
			t.Fatalf("request %d: %v, %v; want %v", i+1, resp, err, want)
		}
	}
	// The HTTP API and gRPC share the rule and its counts: the same rule
	// and client spend one count whichever door they come through, so the
	// HTTP check of the client gRPC used up is denied, and another
	// client's is not.
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"login","key":"203.0.113.7"}`); code != 429 {
		t.Errorf("HTTP check of the client gRPC used up: %d, want 429", code)
	}
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"login","key":"203.0.113.8"}`); code != 200 {
		t.Errorf("HTTP check of another client: %d, want 200", code)
	}
}
