package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// The empty servers: what a rate limit service costs with nothing
// decided, run by this program in a process of its own (-empty), so that
// its CPU is its own.

// emptyRLS answers every ShouldRateLimit OK, one status per descriptor,
// deciding nothing.
type emptyRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (emptyRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return resp, nil
}

// emptyBody is the empty HTTP handler's answer, the size of sluice's
// smallest /v1/check answer's start.
var emptyBody = []byte(`{"allowed":true}` + "\n")

// emptyHTTP reads the request body and answers 200 with emptyBody.
func emptyHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(emptyBody)
}

// emptyMinHeap is the heap the empty servers let grow before they
// collect: sluice serve's --gc-min-heap-mib default, so that the
// comparison is of the work per request, not of two garbage collector
// settings.
const emptyMinHeap = 64 << 20

// serveEmpty serves the empty server kind ("grpc" or "http") on addr
// until SIGTERM, SIGINT, or its parent's death, at most an hour.
func serveEmpty(kind, addr string) error {
	// As sluice serve with a small live heap: no collection until the
	// runtime's memory nears emptyMinHeap.
	debug.SetMemoryLimit(emptyMinHeap)
	debug.SetGCPercent(-1)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	switch kind {
	case "grpc":
		g := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(g, emptyRLS{})
		go func() { <-ctx.Done(); g.Stop() }()
		return g.Serve(ln)
	case "http":
		srv := &http.Server{Handler: http.HandlerFunc(emptyHTTP), ReadHeaderTimeout: 10 * time.Second}
		go func() { <-ctx.Done(); _ = srv.Close() }()
		if err := srv.Serve(ln); err != http.ErrServerClosed {
			return err
		}
		return nil
	}
	return fmt.Errorf("-empty %q is not grpc or http", kind)
}

// startEmpty starts this program as the empty server kind on a free
// loopback address, and returns it and the address.
func startEmpty(kind string) (*process, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	p, err := start("empty "+kind, self, []string{"-empty", kind, "-listen", addr}, nil)
	return p, addr, err
}
