package main

import (
	"context"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthServices are the names the gRPC health service answers for: the
// server as a whole, and the service name envoyproxy/ratelimit registers,
// so that the probes written for it (a Kubernetes grpc probe, Envoy's
// grpc_health_check) work unchanged.
var healthServices = []string{"", "ratelimit"}

// healthEvery is how often the gRPC health status is brought up to date
// with the readiness check.
const healthEvery = time.Second

// grpcHealth is the gRPC health service (grpc.health.v1) of serve's gRPC
// listener: SERVING while ready (the same check as GET /readyz),
// NOT_SERVING when not, and from the start of a shutdown on.
type grpcHealth struct{ s *health.Server }

// newGRPCHealth registers the health service on g and keeps it up to date
// with ready until ctx ends.
func newGRPCHealth(ctx context.Context, g *grpc.Server, ready func(context.Context) error) *grpcHealth {
	h := &grpcHealth{s: health.NewServer()}
	healthpb.RegisterHealthServer(g, h.s)
	update := func() {
		check, cancel := context.WithTimeout(ctx, healthEvery)
		defer cancel()
		st := healthpb.HealthCheckResponse_SERVING
		if ready(check) != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		for _, name := range healthServices {
			h.s.SetServingStatus(name, st)
		}
	}
	update()
	go func() {
		t := time.NewTicker(healthEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				update()
			}
		}
	}()
	return h
}

// drain reports NOT_SERVING from now on, so that clients move away while
// the calls in flight finish.
func (h *grpcHealth) drain() {
	if h != nil {
		h.s.Shutdown()
	}
}

// healthcheck answers GET /healthcheck as envoyproxy/ratelimit does: 200
// "OK" while ready, else 500 (with the reason).
func healthcheck(ready func(context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write([]byte("OK"))
	})
}
