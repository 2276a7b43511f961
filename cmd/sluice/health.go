package main

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-go/sluice/internal/service/server"
)

// healthServices are the names the gRPC health service answers for: the
// server as a whole, and the service name envoyproxy/ratelimit registers,
// so that the probes written for it (a Kubernetes grpc probe, Envoy's
// grpc_health_check) work unchanged.
var healthServices = []string{"", "ratelimit"}

// healthEvery is how often the health state is brought up to date with
// the readiness check.
const healthEvery = time.Second

// drainNotice is how long a health Watch stream stays open once a
// shutdown starts, for its NOT_SERVING to reach the watcher: then it
// ends, so that it does not hold the graceful stop.
const drainNotice = 100 * time.Millisecond

// healthState is readiness as envoyproxy/ratelimit's probes ask for it:
// the gRPC health service and GET /healthcheck. It runs the readiness
// check (that of GET /readyz) every healthEvery in the background and
// answers from the last result, so that no probe makes a store call of
// its own; it reports NOT_SERVING once a shutdown starts. A check that
// fails while the store still decides for some keys (server.Serving: a
// Cluster with some masters down) is SERVING, as /readyz is 200: every
// replica sees the same Cluster.
type healthState struct {
	grpc     *health.Server
	last     atomic.Pointer[error] // nil: ready
	draining chan struct{}         // closed when the shutdown starts
}

// startHealth runs ready now and every healthEvery until ctx ends.
func startHealth(ctx context.Context, ready func(context.Context) error) *healthState {
	h := &healthState{grpc: health.NewServer(), draining: make(chan struct{})}
	update := func() {
		check, cancel := context.WithTimeout(ctx, healthEvery)
		defer cancel()
		st := healthpb.HealthCheckResponse_SERVING
		if err := ready(check); err != nil {
			h.last.Store(&err)
			if !server.Serving(err) {
				st = healthpb.HealthCheckResponse_NOT_SERVING
			}
		} else {
			h.last.Store(nil)
		}
		for _, name := range healthServices {
			h.grpc.SetServingStatus(name, st)
		}
	}
	update()
	go every(ctx, healthEvery, update)
	return h
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// register serves the gRPC health service on g.
func (h *healthState) register(g *grpc.Server) {
	healthpb.RegisterHealthServer(g, drainingHealth{h.grpc, h.draining})
}

// drain reports NOT_SERVING from now on, so that clients move away while
// the calls in flight finish, and ends the Watch streams soon after.
func (h *healthState) drain() {
	h.grpc.Shutdown()
	close(h.draining)
}

// ServeHTTP answers GET /healthcheck as envoyproxy/ratelimit does: 200
// "OK" while ready, else 500 with the reason; 200 "OK" and the reason
// while the store decides for some keys (server.Serving).
func (h *healthState) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-h.draining:
		http.Error(w, "shutting down", http.StatusInternalServerError)
		return
	default:
	}
	if err := h.last.Load(); err != nil && !server.Serving(*err) {
		http.Error(w, "not ready: "+(*err).Error(), http.StatusInternalServerError)
		return
	} else if err != nil {
		w.Write([]byte("OK (degraded: " + (*err).Error() + ")"))
		return
	}
	w.Write([]byte("OK"))
}

// drainingHealth is the health service whose Watch streams end
// drainNotice after a shutdown starts: grpc-go's keeps them open, and
// an open stream holds a graceful stop until its deadline.
type drainingHealth struct {
	*health.Server
	draining <-chan struct{}
}

// Watch streams the status of the service asked for until the client
// leaves or the shutdown ends the stream.
func (h drainingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.draining:
			time.Sleep(drainNotice)
			cancel()
		case <-ctx.Done():
		}
	}()
	return h.Server.Watch(req, watchStream{stream, ctx})
}

// watchStream is a Watch stream with a context of its own.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

// Context returns the stream's own context.
func (s watchStream) Context() context.Context { return s.ctx }
