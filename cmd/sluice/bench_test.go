//go:build integration

package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/service/loadgen"
)

// benchSummary is the JSON summary of sluice bench.
type benchSummary struct {
	Requests, Allowed, Denied, Errors int
	FirstError                        string `json:"first_error"`
}

// runBenchJSON runs sluice bench with args and returns its JSON summary.
func runBenchJSON(t *testing.T, args ...string) benchSummary {
	t.Helper()
	stdout, stderr, code := runBinary(t, nil, append([]string{"bench", "--format", "json", "--progress=false"}, args...)...)
	if code != 0 {
		t.Fatalf("sluice bench %v: exit %d\n%s%s", args, code, stdout, stderr)
	}
	var s benchSummary
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("summary not JSON: %v\n%s", err, stdout)
	}
	return s
}

// TestBench: sluice bench counts exactly what the service decided, over
// HTTP and gRPC (which share one count for a rule and client), with keys
// in turn, a concurrency and a pace.
func TestBench(t *testing.T) {
	d := startServe(t, nil, "--config", writeFile(t, "rules:\n  - {name: b, key: ip, limit: 5, period: 1h}\n"))
	// 400 requests over 20 keys in turn: 20 each, 5 of them admitted.
	s := runBenchJSON(t, "--http", d.base, "--rule", "b", "--keys", "20", "--requests", "400", "--concurrency", "16")
	if s.Requests != 400 || s.Allowed != 100 || s.Denied != 300 || s.Errors != 0 {
		t.Errorf("HTTP: %+v, want 400 requests, 100 allowed, 300 denied", s)
	}
	// Over gRPC, keys 0 to 29: the first 20 spent already over HTTP.
	s = runBenchJSON(t, "--grpc", d.grpc, "--descriptor", "rule=b,remote_address={ip}", "--keys", "30", "--requests", "300", "--concurrency", "8", "--rate", "2000")
	if s.Requests != 300 || s.Allowed != 50 || s.Denied != 250 || s.Errors != 0 {
		t.Errorf("gRPC: %+v, want 300 requests, 50 allowed (10 new keys x 5), 250 denied", s)
	}
	// For a duration, every request sent is counted as answered.
	s = runBenchJSON(t, "--grpc", d.grpc, "--descriptor", "rule=b,remote_address={ip}", "--keys", "1000", "--duration", "500ms")
	if s.Requests == 0 || s.Errors != 0 || s.Allowed+s.Denied != s.Requests {
		t.Errorf("for a duration: %+v, want answers only", s)
	}
	// A rule the service lacks fails every request: exit 1 naming why.
	_, stderr, code := runBinary(t, nil, "bench", "--http", d.base, "--rule", "nope", "--requests", "5", "--progress=false")
	if code != 1 || !strings.Contains(stderr, "every request failed") || !strings.Contains(stderr, `unknown rule \"nope\"`) {
		t.Errorf("unknown rule: exit %d, %s", code, stderr)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--rule", "b"}, "give one of --http and --grpc"},
		{[]string{"--http", d.base}, "--rule is required over HTTP"},
		{[]string{"--grpc", d.grpc, "--descriptor", "rule"}, "want key=value pairs"},
		{[]string{"--grpc", d.grpc, "--rate", "fast"}, "--rate"},
		{[]string{"--grpc", d.grpc, "--keys", "0"}, "--keys 0"},
	} {
		_, stderr, code := runBinary(t, nil, append([]string{"bench"}, bad.args...)...)
		if code != 2 || !strings.Contains(stderr, bad.want) {
			t.Errorf("bench %v: exit %d, %s; want 2 and %q", bad.args, code, stderr, bad.want)
		}
	}
}

// TestBenchRateFlag: --rate must be a finite number; NaN and Inf
// parse with strconv.ParseFloat, pass check, and then the JSON summary
// cannot be encoded (json: unsupported value) after the whole run.
func TestBenchRateFlag(t *testing.T) {
	for _, rate := range []string{"NaN", "nan", "Inf", "+Inf", "1e400"} {
		t.Run(rate, func(t *testing.T) {
			b := benchFlags{grpc: "127.0.0.1:1", entries: "a=b", keys: 1, concurrency: 1, requests: 1, rateText: rate, format: "json", timeout: time.Second}
			if err := b.check(); err == nil {
				r := &loadgen.Result{Sent: 1, Allowed: 1, Elapsed: time.Second, Latencies: []time.Duration{time.Millisecond}}
				t.Errorf("--rate %s accepted (rate %v); the JSON summary then fails: %v", rate, b.rate, writeSummary(io.Discard, r, &b))
			}
		})
	}
}

// TestBenchIPKeys: {ip} makes at most loadgen.MaxIPKeys addresses, so
// more keys are refused where the key or a descriptor value holds it,
// and accepted where nothing does.
func TestBenchIPKeys(t *testing.T) {
	for _, tc := range []struct {
		b  benchFlags
		ok bool
	}{
		{benchFlags{http: "http://x", rule: "r", key: "{ip}"}, false},
		{benchFlags{http: "http://x", rule: "r", key: "k{n}"}, true},
		{benchFlags{grpc: "x", entries: "rule=r,remote_address={ip}"}, false},
		{benchFlags{grpc: "x", entries: "rule=r,user={n}"}, true},
		{benchFlags{grpc: "x", key: "{ip}", entries: "user={n}"}, true}, // --key is for HTTP only
	} {
		b := tc.b
		b.keys, b.concurrency, b.requests, b.rateText, b.format, b.timeout = loadgen.MaxIPKeys+1, 1, 1, "0", "text", time.Second
		err := b.check()
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "{ip} makes at most") {
			t.Errorf("%+v: check = %v, want ok %v", tc.b, err, tc.ok)
		}
	}
}

// TestBenchSlowRate: a rate so low that i/rate seconds would overflow a
// time.Duration (and send every request at once) is refused, as is one
// above what a process sends.
func TestBenchSlowRate(t *testing.T) {
	for _, rate := range []string{"1e-12", "0.0001", "1e8", "-1"} {
		b := benchFlags{grpc: "127.0.0.1:1", entries: "a=b", keys: 1, concurrency: 1, requests: 1, rateText: rate, format: "text", timeout: time.Second}
		if err := b.check(); err == nil {
			t.Errorf("--rate %s accepted", rate)
		}
	}
}

// TestBenchPacedLatency: under --rate, latency is measured from when
// a request was actually sent, not from when the pace says it was due:
// a stall of the service delays the requests queued behind it, yet they
// report near-zero latency (coordinated omission), so p99 hides the stall
// that a client sending at that rate would have seen.
func TestBenchPacedLatency(t *testing.T) {
	b := benchFlags{grpc: "x", keys: 1, concurrency: 1, requests: 20, rate: 200} // one every 5ms
	var calls atomic.Int64
	target := func(ctx context.Context, n int) (bool, error) {
		if calls.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond) // the service stalls once
		}
		return true, nil
	}
	r := b.run(context.Background(), target, io.Discard)
	// Requests 1..19 were due at 5ms..95ms and could leave only after
	// 100ms: over half of them waited at least 50ms behind the stall.
	if p50 := r.Quantile(0.5); p50 < 40*time.Millisecond {
		t.Errorf("paced run behind a 100ms stall: p50 %s, p99 %s; the time queued behind the stall is not counted", p50, r.Quantile(0.99))
	}
}
