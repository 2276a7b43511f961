//go:build integration

package main

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// TestServeShutdownHealthWatch: a client watching the gRPC health service
// (grpc-go's client-side health checking, for one) is told NOT_SERVING
// when a shutdown starts, as the README says, and its open Watch stream
// does not hold the shutdown for the whole --shutdown-timeout.
func TestServeShutdownHealthWatch(t *testing.T) {
	d := startServe(t, nil, "--config", "../../examples/envoy/config", "--shutdown-timeout", "60s")
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch answer: %v %v, want SERVING", first.GetStatus(), err)
	}
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next, err := w.Recv()
	if err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch after SIGTERM: %v %v, want NOT_SERVING", next.GetStatus(), err)
	}
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("still running %v after SIGTERM with an idle health Watch open (--shutdown-timeout 60s): the Watch stream holds GracefulStop;\n%s",
			time.Since(start).Round(time.Second), strings.Join(d.lines, "\n"))
	}
}

// redisCalls returns how many commands srv has run (INFO commandstats),
// the INFO calls themselves left out.
func redisCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "commandstats").(string)
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		c, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		n += c
	}
	return n
}

// TestServeHealthcheckRedisLoad: GET /healthcheck, which --max-inflight
// does not count, answers from the health state kept up to date in the
// background (as envoyproxy/ratelimit's answers from a flag), not with a
// Redis call of its own per request: otherwise any client can drive
// unbounded load onto Redis through a path the in-flight cap exempts.
func TestServeHealthcheckRedisLoad(t *testing.T) {
	srv := redistest.Start(t)
	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", "../../examples/envoy/config", "--on-error", "deny")
	const probes = 200
	before, start := redisCalls(t, srv), time.Now()
	for range probes {
		resp, err := http.Get(d.base + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /healthcheck: %s", resp.Status)
		}
	}
	// The background poller and the replicas' heartbeat call Redis a few
	// times a second whatever the probes.
	allowed := 50 + 20*int(time.Since(start)/time.Second)
	if got := redisCalls(t, srv) - before; got >= allowed {
		t.Errorf("%d GET /healthcheck ran %d Redis commands (allowed %d for the background work): one or more per probe", probes, got, allowed)
	}
}

// TestEnvoyFlagsMissingConfig: an envoyproxy/ratelimit flag given with a
// --config that does not exist (a typo of the directory, a volume not
// mounted) reports the missing config, not that the path "is a sluice
// policy file" and the flag does not apply to it.
func TestEnvoyFlagsMissingConfig(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "ratelimit", "config")
	for _, args := range [][]string{
		{"serve", "--config", missing, "--merge-domains", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"},
		{"check", "--config", missing, "--merge-domains"},
	} {
		_, stderr, _ := runBinary(t, nil, args...)
		if strings.Contains(stderr, "is a sluice policy file") || !strings.Contains(stderr, "no such file or directory") {
			t.Errorf("sluice %s with a missing --config and --merge-domains: %q, want the missing config reported", args[0], stderr)
		}
	}
}

// TestServeJSONAnyMethod: envoyproxy/ratelimit routes /json for any
// method (router.HandleFunc("/json", ...)), so a client that sends its
// request with GET (or PUT) gets a decision there; sluice answers 404
// "no endpoint at /json; the API serves POST /v1/check...", which names
// neither /json nor the method it wants.
func TestServeJSONAnyMethod(t *testing.T) {
	d := startServe(t, nil, "--config", "../../examples/envoy/config")
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.1"}]}]}`
	req, err := http.NewRequest(http.MethodGet, d.base+"/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), `"overallCode":"OK"`) {
		t.Errorf("GET /json with a request: %s %s, want 200 with the decision, as upstream", resp.Status, got)
	}
}

// TestEnvoyHeaderNamesWithoutRateLimitHeaders: --envoy-header-names names
// the headers of --envoy-headers ratelimit only; given without it (the
// default is none), the names are silently unused, though the same
// flags given with a sluice policy file are a usage error. It should be
// one here too, naming --envoy-headers ratelimit.
func TestEnvoyHeaderNamesWithoutRateLimitHeaders(t *testing.T) {
	for _, mode := range []string{"none", "ietf"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cmd := exec.CommandContext(ctx, binary, "serve", "--config", "../../examples/envoy/config", "--envoy-headers", mode,
			"--envoy-header-names", "X-Limit,X-Remaining,X-Reset", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(stderr.String(), "--envoy-headers ratelimit") {
			t.Errorf("--envoy-headers %s --envoy-header-names ...: served (%v, still running after 5s: %v), stderr %q; want a usage error naming --envoy-headers ratelimit",
				mode, err, timedOut, stderr.String())
		}
	}
}
