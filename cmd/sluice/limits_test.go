//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// openRules is a policy file whose one rule no test here exhausts.
const openRules = "rules:\n  - {name: api, key: ip, limit: 1000000, period: 1s}\n"

// slowConn is a client connection that sends a request's headers at once
// and then its body a byte at a time.
type slowConn struct {
	conn   net.Conn
	closed chan struct{} // closed once a read ended: the server closed the connection
	reply  []byte        // what the server sent, once closed is
}

// openSlow connects to addr (host:port) and sends a POST to path
// declaring a body of length bytes, then sends one byte of it every
// every, until a write fails or stop is closed; sent counts the bytes.
// The connection is closed when t ends.
func openSlow(t *testing.T, addr, path string, length int, every time.Duration, stop <-chan struct{}) *slowConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &slowConn{conn: conn, closed: make(chan struct{})}
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, length); err != nil {
		t.Fatal(err)
	}
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for range length {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{' '}); err != nil {
				return
			}
		}
	}()
	go func() {
		c.reply, _ = io.ReadAll(conn)
		close(c.closed)
	}()
	return c
}

// waitClosed fails t unless the server closes every connection of cs
// within timeout.
func waitClosed(t *testing.T, cs []*slowConn, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for i, c := range cs {
		select {
		case <-c.closed:
		case <-deadline:
			open := 0
			for _, c := range cs[i:] {
				select {
				case <-c.closed:
				default:
					open++
				}
			}
			t.Fatalf("%d of %d slow connections still open after %v", open, len(cs), timeout)
		}
	}
}

// TestServeSlowBodies: 300 connections sending a body at 1 byte/s to
// `sluice serve` under a 256-file-descriptor limit are closed by the
// server once --header-timeout plus --body-timeout have passed, and
// legitimate /v1/check and /healthz calls made meanwhile are answered.
func TestServeSlowBodies(t *testing.T) {
	cfg := writeFile(t, openRules)
	d := startDaemonVia(t, []string{"sh", "-c", `ulimit -n 256 && exec "$0" "$@"`}, "serving", nil,
		"serve", "--grpc-listen", "", "--config", cfg, "--header-timeout", "1s", "--body-timeout", "2s")
	addr := strings.TrimPrefix(d.base, "http://")
	stop := make(chan struct{})
	defer close(stop)
	slow := make([]*slowConn, 300)
	for i := range slow {
		slow[i] = openSlow(t, addr, "/v1/check", 1000, time.Second, stop)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	start := time.Now()
	for range 3 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			resp, err := client.Get(d.base + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("/healthz: %s", resp.Status)
				}
			}
			errs <- err
		}()
		go func() {
			defer wg.Done()
			resp, err := client.Post(d.base+"/v1/check", "application/json", strings.NewReader(`{"rule":"api","key":"192.0.2.1"}`))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("/v1/check: %s", resp.Status)
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a legitimate call among 300 slow bodies: %v", err)
		}
	}
	t.Logf("legitimate calls among 300 slow bodies answered within %v", time.Since(start).Round(time.Millisecond))
	// Every slow body is cut, each 3s after its connection was accepted,
	// although its client would go on for 1000s.
	waitClosed(t, slow, 30*time.Second)
	// Those the server read from are told why: a 408 that names no
	// address.
	answered := 0
	for _, c := range slow {
		if len(c.reply) == 0 {
			continue // never accepted while the descriptors ran out
		}
		answered++
		if r := string(c.reply); !strings.HasPrefix(r, "HTTP/1.1 408 ") || !strings.Contains(r, "REQUEST_TIMEOUT") || strings.Contains(r, "127.0.0.1") {
			t.Fatalf("a slow body was answered %q, want a 408 REQUEST_TIMEOUT naming no address", r)
		}
	}
	if answered == 0 {
		t.Error("no slow body was answered: want a 408 for those the server read from")
	}
	t.Logf("%d of %d slow bodies answered 408 before their connection was closed", answered, len(slow))
	if !d.logged("Accept error") {
		t.Error("no accept error logged: the file-descriptor limit was never reached, and the test proves nothing")
	}
	// Every line the server logged, its own net/http lines included, is
	// structured.
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, line := range d.lines {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line not JSON: %s", line)
		}
	}
}

// busy checks that resp is the 503 of a listener at --max-inflight n.
func busy(t *testing.T, resp *http.Response, n int) {
	t.Helper()
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s, body not JSON: %v", resp.Status, err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		resp.Header.Get("Content-Type") != "application/json" || body.Error.Code != "SERVER_BUSY" ||
		!strings.Contains(body.Error.Message, fmt.Sprintf("limit of %d requests in flight", n)) {
		t.Fatalf("at the cap: %s Retry-After %q %q %+v, want 503, Retry-After 1 and SERVER_BUSY naming %d",
			resp.Status, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), body.Error, n)
	}
}

// TestMaxInflight: a listener already working on --max-inflight requests
// answers one more with 503 and Retry-After at once; serve's probes and
// metrics answer still; once the requests in flight end, requests are
// served again.
func TestMaxInflight(t *testing.T) {
	t.Run("serve, held by slow bodies", func(t *testing.T) {
		d := startServe(t, nil, "--config", writeFile(t, openRules), "--max-inflight", "3", "--body-timeout", "60s")
		stop := make(chan struct{})
		var held []*slowConn
		for range 3 {
			held = append(held, openSlow(t, strings.TrimPrefix(d.base, "http://"), "/v1/check", 100, time.Second, stop))
		}
		var last *http.Response
		waitUntil(t, 10*time.Second, func() error {
			// A held request that arrived while a probe below was in
			// flight was itself refused, and its connection closed:
			// hold another in its place.
			for i, c := range held {
				select {
				case <-c.closed:
					held[i] = openSlow(t, strings.TrimPrefix(d.base, "http://"), "/v1/check", 100, time.Second, stop)
				default:
				}
			}
			resp, err := http.Post(d.base+"/v1/check", "application/json", strings.NewReader(`{"rule":"api","key":"192.0.2.1"}`))
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusServiceUnavailable {
				resp.Body.Close()
				return fmt.Errorf("%s with 3 requests held", resp.Status)
			}
			last = resp
			return nil
		})
		busy(t, last, 3)
		// A slow body refused at the cap is answered and let go at once,
		// not read to its end (100s) as net/http would.
		refused := openSlow(t, strings.TrimPrefix(d.base, "http://"), "/v1/check", 100, time.Second, stop)
		waitClosed(t, []*slowConn{refused}, 20*time.Second)
		if r := string(refused.reply); !strings.HasPrefix(r, "HTTP/1.1 503 ") || !strings.Contains(r, "SERVER_BUSY") {
			t.Errorf("a slow body at the cap was answered %q, want 503 SERVER_BUSY", r)
		}
		for _, path := range []string{"/healthz", "/readyz", "/healthcheck", "/metrics"} {
			resp, err := http.Get(d.base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("%s at the cap: %s, want 200 (not counted)", path, resp.Status)
			}
		}
		d.waitLog(t, "requests refused at --max-inflight")
		close(stop)
		for _, c := range held {
			c.conn.Close()
		}
		d.waitRule(t, "api")
	})
	t.Run("proxy, held by a slow upstream", func(t *testing.T) {
		release := make(chan struct{})
		var holding atomic.Int64
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				holding.Add(1)
				select {
				case <-release:
				case <-time.After(20 * time.Second):
				}
			}
			io.WriteString(w, "ok")
		}))
		defer up.Close()
		defer close(release)
		d := startProxy(t, nil, "--config", writeFile(t, openRules), "--upstream", up.URL, "--max-inflight", "2")
		done := make(chan struct{}, 2)
		for range 2 {
			go func() {
				defer func() { done <- struct{}{} }()
				if resp, err := http.Get(d.base + "/hold"); err == nil {
					resp.Body.Close()
				}
			}()
		}
		waitUntil(t, 10*time.Second, func() error {
			if n := holding.Load(); n < 2 {
				return fmt.Errorf("%d requests held at the upstream", n)
			}
			return nil
		})
		resp, err := http.Get(d.base + "/other")
		if err != nil {
			t.Fatal(err)
		}
		busy(t, resp, 2)
		release <- struct{}{}
		release <- struct{}{}
		<-done
		<-done
		waitUntil(t, 10*time.Second, func() error {
			resp, err := http.Get(d.base + "/other")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("after the held requests: %s", resp.Status)
			}
			return nil
		})
	})
}

// TestProxyProgress: the proxy, with a --body-idle-timeout of 1s, streams
// a response and takes an upload that each last longer than that, as
// long as they move; an upload that stops, or trickles below
// --min-body-rate, is cut with 408.
func TestProxyProgress(t *testing.T) {
	const ticks, tickEvery = 8, 300 * time.Millisecond
	bigDone := make(chan error, 1) // how /big ended
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			// Up to 1 GiB, far more than the buffers between here and a
			// client that reads nothing.
			chunk := make([]byte, 64<<10)
			var err error
			for i := 0; i < 1<<14 && err == nil; i++ {
				_, err = w.Write(chunk)
			}
			bigDone <- err
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return // the proxy gave up on the upload
		}
		fmt.Fprintf(w, "read %d\n", n)
		if r.URL.Path == "/tick" {
			for i := range ticks {
				w.(http.Flusher).Flush()
				time.Sleep(tickEvery)
				fmt.Fprintf(w, "tick %d\n", i)
			}
		}
	}))
	defer up.Close()
	d := startProxy(t, nil, "--config", writeFile(t, openRules), "--upstream", up.URL,
		"--body-idle-timeout", "1s", "--min-body-rate", "4096")
	addr := strings.TrimPrefix(d.base, "http://")

	// upload returns a body of n chunks of size bytes, one every every.
	upload := func(n, size int, every time.Duration) io.Reader {
		pr, pw := io.Pipe()
		go func() {
			chunk := make([]byte, size)
			for range n {
				time.Sleep(every)
				if _, err := pw.Write(chunk); err != nil {
					return
				}
			}
			pw.Close()
		}()
		return pr
	}
	tests := []struct {
		name string
		body io.Reader
		path string
		want string
	}{
		{"streamed response", nil, "/tick", "read 0\n"},
		{"upload", upload(16, 256<<10, 200*time.Millisecond), "/count", "read 4194304\n"},
		{"upload, then a streamed response", upload(8, 64<<10, 200*time.Millisecond), "/tick", "read 524288\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path == "/tick" {
				for i := range ticks {
					tt.want += fmt.Sprintf("tick %d\n", i)
				}
			}
			start := time.Now()
			resp, err := http.Post(d.base+tt.path, "application/octet-stream", tt.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 || string(got) != tt.want {
				t.Fatalf("%s %q (%v), want 200 %q", resp.Status, got, err, tt.want)
			}
			if took := time.Since(start); took < time.Second {
				t.Fatalf("took %v, not longer than --body-idle-timeout: the test proves nothing", took)
			}
		})
	}
	for _, tt := range []struct {
		name  string
		every time.Duration // between bytes
	}{
		{"stalled upload", time.Hour},
		{"trickled upload", 100 * time.Millisecond}, // never idle 1s, but 10 bytes a second
	} {
		t.Run(tt.name, func(t *testing.T) {
			stop := make(chan struct{})
			defer close(stop)
			c := openSlow(t, addr, "/count", 1000, tt.every, stop)
			if _, err := c.conn.Write([]byte("0123456789")); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, []*slowConn{c}, 15*time.Second)
			if !strings.HasPrefix(string(c.reply), "HTTP/1.1 408 ") || !strings.Contains(string(c.reply), "REQUEST_TIMEOUT") {
				t.Fatalf("reply %q, want a 408 REQUEST_TIMEOUT", c.reply)
			}
			d.waitLog(t, "request body stalled")
		})
	}
	t.Run("client that stops reading", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /big HTTP/1.1\r\nHost: sluice\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// The proxy gives up on the client once a write has waited 1s, and
		// so stops reading the upstream's answer.
		select {
		case err := <-bigDone:
			if err == nil {
				t.Fatal("the upstream wrote 1 GiB to a client that reads nothing")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the upstream is still writing to a client that has read nothing for 20s")
		}
	})
}

// TestServeGRPCLimits: serve's gRPC listener refuses a ShouldRateLimit
// with more than envoy.MaxDescriptors descriptors, and a message over
// its size cap, before deciding anything.
func TestServeGRPCLimits(t *testing.T) {
	d := startServe(t, nil, "--config", writeFile(t, "rules:\n  - {name: api, key: ip, limit: 1, period: 1h}\n"))
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	one := func(addr string) *rlcommon.RateLimitDescriptor {
		return &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "rule", Value: "api"}, {Key: "remote_address", Value: addr}}}
	}
	many := make([]*rlcommon.RateLimitDescriptor, envoy.MaxDescriptors+1)
	for i := range many {
		many[i] = one(fmt.Sprintf("10.0.0.%d", i))
	}
	huge := one("10.0.0.0")
	huge.Entries = append(huge.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: "pad", Value: strings.Repeat("x", 2<<20)})
	for _, tt := range []struct {
		name string
		ds   []*rlcommon.RateLimitDescriptor
		code codes.Code
		says string
	}{
		{"too many descriptors", many, codes.InvalidArgument, fmt.Sprintf("holds %d descriptors; at most %d", len(many), envoy.MaxDescriptors)},
		{"too large", []*rlcommon.RateLimitDescriptor{huge}, codes.ResourceExhausted, "larger than max"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: tt.ds})
		cancel()
		if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v, want %v saying %q", tt.name, err, tt.code, tt.says)
		}
	}
	// Nothing was spent: the first client's one request is still there.
	resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many[:1]})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after the refused requests: %v %v, want OK", resp, err)
	}
}

// TestServeGRPCInflight: serve's gRPC listener working on --max-inflight
// calls, held by a paused Redis (CLIENT PAUSE), answers one more with
// Unavailable at once, and its health service SERVING still: a
// Kubernetes grpc probe (or Envoy's grpc_health_check) refused at the cap
// would restart, or eject, a busy replica when it is needed most.
func TestServeGRPCInflight(t *testing.T) {
	srv := redistest.Start(t)
	d := startServe(t, nil, "--max-inflight", "1", "--config",
		writeFile(t, "redis: {url: redis://"+srv.Addr+", on_error: allow}\nrules:\n  - {name: api, key: ip, limit: 1000000, period: 1s}\n"))
	// A connection each for the test's calls and for three that hold the
	// slot: on one, a client would wait for the stream --max-inflight
	// also allows per connection.
	clients := make([]rlsv3.RateLimitServiceClient, 4)
	var health healthpb.HealthClient
	for i := range clients {
		conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
		if i == 0 {
			health = healthpb.NewHealthClient(conn)
		}
	}
	call := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := clients[i].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "rule", Value: "api"}, {Key: "remote_address", Value: "192.0.2.1"}}}}})
		return err
	}
	if err := call(0); err != nil {
		t.Fatalf("with Redis answering: %v", err)
	}
	pause := func() { srv.Do(t, "CLIENT", "PAUSE", "3000") }
	// Three goroutines keep a call in flight, waiting on the paused Redis
	// up to the store's deadline (and, once the breaker opens, one after
	// the other), while the test's own calls look for the refusal.
	stop := make(chan struct{})
	var holders sync.WaitGroup
	defer func() { close(stop); holders.Wait() }()
	for i := 1; i < len(clients); i++ {
		holders.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = call(i)
			}
		})
	}
	pause()
	paused := time.Now()
	waitUntil(t, 10*time.Second, func() error {
		if time.Since(paused) > 2*time.Second {
			pause()
			paused = time.Now()
		}
		err := call(0)
		if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "limit of 1 calls in flight") {
			return nil
		}
		return fmt.Errorf("one call over the cap: %v, want Unavailable naming the cap", err)
	})
	d.waitLog(t, "requests refused at --max-inflight")
	// At the cap (the held call takes the slot for the store timeout at a
	// time), a health check right after each of 20 refusals answers.
	atCap := 0
	for deadline := time.Now().Add(10 * time.Second); atCap < 20 && time.Now().Before(deadline); {
		if time.Since(paused) > 2*time.Second {
			pause()
			paused = time.Now()
		}
		if status.Code(call(0)) != codes.Unavailable {
			continue
		}
		atCap++
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
		cancel()
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("gRPC health at --max-inflight: %v %v, want SERVING (probes are not counted)", r.GetStatus(), err)
		}
	}
	if atCap == 0 {
		t.Fatal("never saw the listener at its cap again")
	}
}

// TestMaxHeaderBytes: headers over --max-header-bytes are answered 431.
func TestMaxHeaderBytes(t *testing.T) {
	d := startServe(t, nil, "--config", writeFile(t, openRules), "--max-header-bytes", "8192")
	for _, tt := range []struct {
		size int
		want int
	}{{4 << 10, 200}, {64 << 10, http.StatusRequestHeaderFieldsTooLarge}} {
		req, _ := http.NewRequest("GET", d.base+"/healthz", nil)
		req.Header.Set("X-Pad", strings.Repeat("x", tt.size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("a %d-byte header: %s, want %d", tt.size, resp.Status, tt.want)
		}
	}
}

// TestListenFlagErrors: a bound that would turn a limit off, or a
// negative one, is a usage error naming the flag.
func TestListenFlagErrors(t *testing.T) {
	cfg := writeFile(t, openRules)
	for _, tt := range []struct {
		env  []string
		args []string
		says string
	}{
		{nil, []string{"serve", "--header-timeout", "0"}, "--header-timeout 0s must be positive"},
		{nil, []string{"serve", "--body-timeout", "-1s"}, "--body-timeout -1s must be positive"},
		{[]string{"SLUICE_IDLE_TIMEOUT=0s"}, []string{"serve"}, "--idle-timeout 0s must be positive"},
		{nil, []string{"serve", "--max-header-bytes", "0"}, "--max-header-bytes 0 must be positive"},
		{nil, []string{"serve", "--max-inflight", "-1"}, "--max-inflight -1 is negative"},
		{[]string{"SLUICE_BODY_IDLE_TIMEOUT=0s"}, []string{"proxy", "--upstream", "http://127.0.0.1:1"}, "--body-idle-timeout 0s must be positive"},
		{nil, []string{"proxy", "--upstream", "http://127.0.0.1:1", "--min-body-rate", "-5"}, "--min-body-rate -5 is negative"},
	} {
		_, stderr, code := runBinary(t, tt.env, append(tt.args, "--config", cfg)...)
		if code != 2 || !strings.Contains(stderr, tt.says) {
			t.Errorf("%v %v: exit %d, %q; want 2 saying %q", tt.env, tt.args, code, stderr, tt.says)
		}
	}
}

// TestManyKeepAlive: 2000 clients, each on a keep-alive connection of its
// own, all at once, are all answered, under the default --max-inflight
// (1024): the cap counts requests being worked on, not connections, and
// none is refused while the server keeps up.
func TestManyKeepAlive(t *testing.T) {
	const clients, each = 2000, 5
	d := startServe(t, nil, "--config", writeFile(t, openRules))
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var ok, busy, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			for range each {
				body := fmt.Sprintf(`{"rule":"api","key":"10.9.%d.%d"}`, w/250, w%250)
				resp, err := c.Post(d.base+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusServiceUnavailable:
					busy.Add(1)
				default:
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d clients x %d requests: %d answered 200, %d refused as busy, %d failed", clients, each, ok.Load(), busy.Load(), failed.Load())
	if failed.Load() != 0 || ok.Load()+busy.Load() != clients*each {
		t.Errorf("%d of %d requests failed or got another answer, want none", failed.Load(), clients*each)
	}
	if busy.Load() > clients*each/10 {
		t.Errorf("%d of %d requests refused as busy, want (nearly) none: the server keeps up", busy.Load(), clients*each)
	}
}

// TestFloodUniqueKeys: a flood of distinct client keys through /v1/check
// leaves sluice serve's in-memory store at its memory.max_keys, forgetting
// the least recently used (counted in sluice_memory_evictions_total), and
// every request answered; a key in use all along keeps its count.
func TestFloodUniqueKeys(t *testing.T) {
	const capacity, flood = 2000, 20000
	d := startServe(t, nil, "--config", writeFile(t, fmt.Sprintf(
		"memory: {max_keys: %d}\nrules:\n  - {name: api, key: ip, limit: 5, period: 1h}\n", capacity)))
	// One keep-alive connection per worker: 20,000 connections opened and
	// closed would leave as many ports in TIME_WAIT for the tests after.
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	checkCost := func(key string, cost int) int {
		resp, err := c.Post(d.base+"/v1/check", "application/json", strings.NewReader(fmt.Sprintf(`{"rule":"api","key":%q,"cost":%d}`, key, cost)))
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	check := func(key string) int { return checkCost(key, 1) }
	for range 3 {
		check("192.0.2.1") // the key in use: 2 left
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1); i <= flood; i = next.Add(1) {
				if code := check(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255)); code != 200 {
					failed.Add(1)
				}
				if i%500 == 0 {
					checkCost("192.0.2.1", 0) // looked at now and then: never the least recent
				}
			}
		})
	}
	wg.Wait()
	keys, err := metric(d, "sluice_memory_keys")
	if err != nil {
		t.Fatal(err)
	}
	evicted, err := metric(d, "sluice_memory_evictions_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d distinct keys into a store of %d: %v held, %v evicted", flood, capacity, keys, evicted)
	if failed.Load() != 0 {
		t.Errorf("%d requests of the flood were not answered 200", failed.Load())
	}
	if keys > capacity*1.1 || evicted < flood-capacity*1.1 {
		t.Errorf("after %d keys into %d: %v held, %v evicted; want about %d held, the rest evicted", flood, capacity, keys, evicted, capacity)
	}
	// The key in use kept its count: 2 left of 5, not a fresh 5.
	for i, want := range []int{200, 200, 429} {
		if code := check("192.0.2.1"); code != want {
			t.Errorf("the key in use all along, check %d after the flood: %d, want %d (its count survived)", i+1, code, want)
		}
	}
}
