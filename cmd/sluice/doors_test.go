//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/internal/service/server"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/policyfile"
	"github.com/sluice-go/sluice/store/memory"
)

// door sends one request for the test's client through one entry point
// and reports whether it was admitted.
type door struct {
	name string
	send func(t *testing.T) bool
}

// doorsRules is a policy whose two rules name their client by address
// and by API key; the client of the test is 127.0.0.1 with API key
// team-a, whichever door it comes through.
const doorsRules = `
rules:
  - {name: per-ip, key: ip, limit: 7, period: 1h}
  - {name: per-key, group: keys, match: /api/, key: header:X-API-Key, limit: 5, period: 1h, algorithm: gcra}
`

// TestDoorsShareOneCount: one rule and client spend one count whether the
// request comes through the net/http middleware, the proxy, POST
// /v1/check or Envoy's gRPC (a sluice policy file), on the memory store
// (one process, one Policy behind every door), with the same rules built
// in code, and on Redis (the service and the proxy as processes of their
// own, the middleware in this one).
// Requests rotate through the doors; the per-key rule (5 per hour) binds,
// so exactly 5 are admitted in all, however they are spread.
func TestDoorsShareOneCount(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		cfg := writeFile(t, doorsRules)
		p, err := policyfile.Open(cfg, policyfile.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		countDoors(t, inProcessDoors(t, p.Engine(), p.Middleware))
	})
	t.Run("code", func(t *testing.T) {
		// The same rules built in code, behind the same doors.
		set, err := policy.Compile([]policy.Rule{
			{Name: "per-ip", Limits: []sluice.Limit{sluice.PerHour(7)}},
			{Name: "per-key", Group: "keys", Match: "/api/", Key: policy.Key{Source: policy.KeyHeader, Name: "X-API-Key"},
				Limits: []sluice.Limit{sluice.PerHour(5).Using(sluice.GCRA)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		e := policy.New(sluice.New(memory.New()), set, policy.WithLogger(slog.New(slog.DiscardHandler)))
		countDoors(t, inProcessDoors(t, e, httplimit.New(e)))
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		cfg := writeFile(t, "redis: {url: redis://"+srv.Addr+"}\n"+doorsRules)
		p, err := policyfile.Open(cfg, policyfile.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		up := startUpstream(t)
		proxy := startProxy(t, nil, "--config", cfg, "--upstream", up.URL)
		serve := startServe(t, nil, "--config", cfg)
		countDoors(t, []door{
			middlewareDoor(t, p.Middleware),
			httpDoor("proxy", proxy.base+"/api/orders"),
			checkDoor(serve.base),
			grpcDoor(t, serve.grpc),
		})
	})
}

// inProcessDoors serves every door in this process over engine e, the
// middleware (and the proxy's) being limit: the middleware, the proxy
// (limit over the reverse proxy that sluice proxy forwards with), the
// HTTP API and Envoy's gRPC.
func inProcessDoors(t *testing.T, e *policy.Engine, limit func(http.Handler) http.Handler) []door {
	t.Helper()
	up := startUpstream(t)
	target, _ := url.Parse(up.URL)
	proxy := httptest.NewServer(limit(newReverseProxy(target, nil, slog.New(slog.DiscardHandler))))
	t.Cleanup(proxy.Close)
	api := httptest.NewServer(server.New(e))
	t.Cleanup(api.Close)
	g := grpc.NewServer()
	envoy.Register(g, envoy.NewRulesService(e))
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(gln)
	t.Cleanup(g.Stop)
	return []door{
		middlewareDoor(t, limit),
		httpDoor("proxy", proxy.URL+"/api/orders"),
		checkDoor(api.URL),
		grpcDoor(t, gln.Addr().String()),
	}
}

// countDoors sends 4 rounds of requests through every door and demands
// that exactly 5 are admitted, the first 5.
func countDoors(t *testing.T, doors []door) {
	t.Helper()
	admitted := 0
	for i := range 4 * len(doors) {
		d := doors[i%len(doors)]
		ok := d.send(t)
		if ok {
			admitted++
		}
		if want := i < 5; ok != want {
			t.Errorf("request %d through %s: admitted %v, want %v", i+1, d.name, ok, want)
		}
	}
	if admitted != 5 {
		t.Errorf("admitted %d requests in all, want 5: the doors do not share one count", admitted)
	}
}

// middlewareDoor serves the middleware limit in this process.
func middlewareDoor(t *testing.T, limit func(http.Handler) http.Handler) door {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	s := httptest.NewServer(limit(ok))
	t.Cleanup(s.Close)
	return httpDoor("middleware", s.URL+"/api/orders")
}

// httpDoor sends GET u with the test's API key: admitted on 200.
func httpDoor(name, u string) door {
	return door{name: name, send: func(t *testing.T) bool {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("X-API-Key", "team-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: status %d", name, resp.StatusCode)
		}
		return resp.StatusCode == http.StatusOK
	}}
}

// checkDoor asks POST /v1/check/batch for both rules of the client, as a
// service that decides for its callers would: one decision.
func checkDoor(base string) door {
	return door{name: "/v1/check/batch", send: func(t *testing.T) bool {
		body := `{"checks":[{"rule":"per-ip","key":"127.0.0.1"},{"rule":"per-key","key":"team-a"}]}`
		resp, err := http.Post(base+"/v1/check/batch", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/v1/check/batch: %d %s", resp.StatusCode, b)
		}
		return bytes.Contains(b, []byte(`"results":`)) && bytes.HasSuffix(bytes.TrimSpace(b), []byte(`"allowed":true}`))
	}}
}

// grpcDoor asks ShouldRateLimit with one descriptor per rule, as Envoy's
// remote_address and request_headers actions write them.
func grpcDoor(t *testing.T, addr string) door {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	entry := func(k, v string) *rlcommon.RateLimitDescriptor_Entry {
		return &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	return door{name: "gRPC", send: func(t *testing.T) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{entry("rule", "per-ip"), entry("remote_address", "127.0.0.1")}},
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{entry("rule", "per-key"), entry("x-api-key", "team-a")}},
		}})
		if err != nil {
			t.Fatal(fmt.Errorf("gRPC: %w", err))
		}
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
	}}
}
