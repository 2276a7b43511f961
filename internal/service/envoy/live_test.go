//go:build integration

package envoy

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/proc"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/internal/testing/testutil"
	"github.com/sluice-go/sluice/store/redis"
)

// TestAgainstUpstream runs the conformance suite against envoyproxy/ratelimit
// itself: its service_cmd, serving testdata/upstream as its
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY on a redis-server
// of its own, asked the same requests over gRPC and expected to give the
// same whole responses as sluice (TestUpstreamConformance). So the
// expectations are not only read from upstream's code: upstream gives
// them. duration_until_reset, on upstream's real clock, is checked
// against the clock to the second.
func TestAgainstUpstream(t *testing.T) {
	bin := needUpstream(t)
	srv := redistest.Start(t)
	root := upstreamRoot(t)
	c := &conformance{t: t, client: dialUpstream(t, startUpstream(t, bin, root, srv.Addr)), live: true}
	// The suite's minute windows must not end while it runs (a few
	// seconds at most).
	if s := time.Now().Second(); s > 40 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	runConformance(c)
}

// TestAgainstUpstreamHeaders: with its LIMIT_RESPONSE_HEADERS_ENABLED,
// envoyproxy/ratelimit and sluice with HeadersRateLimit answer the same
// requests (the tightest descriptor among several; over the limit, in
// shadow and quota mode; without a limit) with the same whole responses,
// headers included, both on the real clock.
func TestAgainstUpstreamHeaders(t *testing.T) {
	bin := needUpstream(t)
	root := upstreamRoot(t)
	up := dialUpstream(t, startUpstream(t, bin, root, redistest.Start(t).Addr, "LIMIT_RESPONSE_HEADERS_ENABLED=true"))
	cfg, err := LoadConfig(filepath.Join(root, "ratelimit", "config"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := redis.Open("redis://" + redistest.Start(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ours := serve(t, NewService(sluice.New(store), cfg, WithHeaders(HeadersRateLimit), WithLogger(slog.New(slog.DiscardHandler))))
	if s := time.Now().Second(); s > 40 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	for i, ds := range [][]*commonv3.RateLimitDescriptor{
		{desc("key2", "h"), desc("key3", "h")},
		{desc("key3", "h"), desc("key2", "h")},
		{desc("shadow", "h")},
		{desc("shadow", "h"), desc("key2", "h")},
		{desc("quota", "h"), desc("key2", "h")},
		{desc("quota", "h"), desc("key2", "h")},
		{desc("nothing", "h")},
		{desc("open", "h")},
		{desc("key2", "h"), desc("nothing", "h"), desc("key3", "h")},
	} {
		req := &rlsv3.RateLimitRequest{Domain: "another", Descriptors: ds}
		if i == 7 {
			req.Domain = "basic"
		}
		if ns := time.Now().Nanosecond(); ns > 800e6 {
			time.Sleep(time.Duration(1e9-ns) + 20*time.Millisecond)
		}
		want, err := up.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ours.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("request %d %v:\n  sluice %v\nupstream %v", i, ds, got, want)
		}
	}
}

// upstreamRoot returns a RUNTIME_ROOT holding testdata/upstream as its
// ratelimit/config directory.
func upstreamRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadDir("testdata/upstream")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata/upstream", n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// dialUpstream returns a client of the rate limit service at addr,
// closed when t ends.
func dialUpstream(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// needUpstream returns the path of upstream's service_cmd at the version
// the suite is judged by: the tool directive of tools/go.mod, built by go
// tool into the Go build cache the first time (testutil.Tool).
func needUpstream(t *testing.T) string {
	t.Helper()
	redistest.Need(t)
	return testutil.Tool(t, "service_cmd")
}

// startUpstream starts service_cmd on free loopback ports with its
// configuration under root and Redis at redisAddr, waits until it
// answers, stops it by pid when t ends, and returns its gRPC address.
func startUpstream(t *testing.T, bin, root, redisAddr string, env ...string) string {
	t.Helper()
	ports := make([]string, 3)
	for i := range ports {
		p, err := proc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = strconv.Itoa(p)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+ports[0], "GRPC_HOST=127.0.0.1", "GRPC_PORT="+ports[1], "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+ports[2],
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true")
	cmd.Env = append(cmd.Env, env...)
	var out testutil.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	proc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	addr := "127.0.0.1:" + ports[1]
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("envoyproxy/ratelimit exited:\n%s", out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "probe", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "v")}})
		cancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit did not answer within 60s: %v\n%s", err, out.String())
		}
	}
}
