//go:build integration

package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// TestServeUpstreamProbes: serve answers what envoyproxy/ratelimit's
// deployments probe and call besides ShouldRateLimit: the gRPC health
// service (for "" and "ratelimit"), GET /healthcheck and POST /json; the
// health follows readiness (on_error deny with Redis stopped: not
// serving, then serving again).
func TestServeUpstreamProbes(t *testing.T) {
	srv := redistest.Start(t)
	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", "../../examples/envoy/config", "--on-error", "deny")
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	status := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health Check(%q): %v", service, err)
		}
		return r.GetStatus()
	}
	healthcheck := func() (int, string) {
		resp, err := http.Get(d.base + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// waitFor polls until cond holds, for a generous while.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 20s: %s", what)
			}
		}
	}
	for _, s := range healthServices {
		if st := status(s); st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, want SERVING", s, st)
		}
	}
	if code, body := healthcheck(); code != 200 || body != "OK" {
		t.Errorf("GET /healthcheck: %d %q, want 200 OK", code, body)
	}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"generic_key","value":"login"},{"key":"remote_address","value":"192.0.2.9"}]}]}`
	for i := range 6 {
		code, _, got := d.post(t, "/json", body)
		if want := map[bool]int{true: 200, false: 429}[i < 5]; code != want || !strings.Contains(got, `"requestsPerUnit":5`) {
			t.Fatalf("POST /json %d: %d %s, want %d with the login limit", i, code, got, want)
		}
	}

	srv.Stop()
	waitFor("health NOT_SERVING with Redis stopped under on_error deny", func() bool {
		return status("ratelimit") == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if code, _ := healthcheck(); code != 500 {
		t.Errorf("GET /healthcheck with Redis stopped: %d, want 500", code)
	}
	srv.Restart(t)
	waitFor("health SERVING again once Redis is back", func() bool {
		return status("") == healthpb.HealthCheckResponse_SERVING
	})
}
