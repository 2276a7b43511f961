//go:build integration

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// startServe starts `sluice serve` with args on free ports and waits for
// its "serving" log line.
func startServe(t *testing.T, env []string, args ...string) *daemon {
	t.Helper()
	return startDaemon(t, "serving", env, append([]string{"serve", "--grpc-listen", "127.0.0.1:0"}, args...)...)
}

func TestServe(t *testing.T) {
	srv := redistest.Start(t)
	cfg := writeFile(t, `
redis:
  on_error: deny
rules:
  - {name: login, match: POST /login, key: ip, limit: 2, period: 1m, algorithm: sliding_log}
  - {name: search, match: /search, key: ip, limit: 5, period: 1s}
`)
	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", cfg)

	for i, want := range []int{200, 200, 429} {
		code, h, body := d.post(t, "/v1/check", `{"rule":"login","key":"203.0.113.7"}`)
		if code != want || !strings.Contains(body, `"allowed":`) {
			t.Fatalf("check %d: %d %s, want %d", i+1, code, body, want)
		}
		if want == 429 && h.Get("Retry-After") != "60" {
			t.Errorf("429 Retry-After %q, want 60", h.Get("Retry-After"))
		}
	}
	for _, bad := range []struct {
		name, body string
		code       int
		says       string
	}{
		{"unknown rule", `{"rule":"nope","key":"k"}`, 400, `unknown rule \"nope\"`},
		{"bad JSON", `{"rule":"login",`, 400, "BAD_REQUEST"},
		{"negative cost", `{"rule":"login","key":"192.0.2.1","cost":-1}`, 400, "cost"},
		{"huge cost", `{"rule":"login","key":"192.0.2.1","cost":1000000}`, 400, "cost"},
		{"oversized body", `{"rule":"login","key":"` + strings.Repeat("k", 100<<10) + `"}`, 413, "TOO_LARGE"},
	} {
		if code, _, body := d.post(t, "/v1/check", bad.body); code != bad.code || !strings.Contains(body, bad.says) {
			t.Errorf("%s: %d %.200s, want %d saying %s", bad.name, code, body, bad.code, bad.says)
		}
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
		resp, err := http.Get(d.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	// Metrics are read with GET: another method is told so.
	if code, hdr, body := d.post(t, "/metrics", "{}"); code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD" || !strings.Contains(body, "use GET") {
		t.Errorf("POST /metrics: %d, Allow %q, %.200s; want 405, Allow GET, HEAD, saying use GET", code, hdr.Get("Allow"), body)
	}
	// Prometheus metrics count what happened.
	text := scrapeMetrics(t, d)
	for _, want := range []string{
		`sluice_decisions_total{outcome="allowed",rule="login"} 2`,
		`sluice_decisions_total{outcome="denied",rule="login"} 1`,
		`sluice_store_duration_seconds_count{op="take"} 3`,
		// Every series from the start: a rule not asked yet, errors,
		// reloads. Each POST /v1/check (8, the bad ones too) took its
		// time at the http door; no other door was asked.
		`sluice_decisions_total{outcome="denied",rule="search"} 0`,
		`sluice_store_errors_total{op="take"} 0`,
		`sluice_config_reloads_total{result="rejected"} 0`,
		`sluice_decision_duration_seconds_count{door="http"} 8`,
		`sluice_decision_duration_seconds_count{door="grpc"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Redis goes away: under on_error deny the service is no longer ready.
	srv.Stop()
	resp, err := http.Get(d.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("/readyz with Redis down under deny: %d, want 503", resp.StatusCode)
	}
	// Five failures in a row over 50ms open the breaker: logged once, and
	// shown.
	waitUntil(t, 10*time.Second, func() error {
		if code, _, _ := d.post(t, "/v1/check", `{"rule":"login","key":"192.0.2.1"}`); code != 503 {
			t.Errorf("check with Redis down under deny: %d, want 503", code)
		}
		if !d.logged("store failing") {
			return errors.New(`no "store failing" logged yet`)
		}
		return nil
	})
	resp, err = http.Get(d.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(ready), `"breaker":"open"`) {
		t.Errorf("/readyz with the breaker open: %d %s, want 503 saying the breaker is open", resp.StatusCode, ready)
	}
	// SIGTERM: a clean exit.
	if code := d.terminate(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d, want 0", code)
	}
}

func TestServeInMemory(t *testing.T) {
	cfg := writeFile(t, `
rules:
  - {name: r, key: ip, limit: 1, period: 1m}
`)
	d := startServe(t, nil, "--config", cfg)
	if early := strings.Join(d.early, "\n"); !strings.Contains(early, "in-memory store, whose limits hold per process") {
		t.Errorf("no line saying the limits are per process:\n%s", early)
	}
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"r","key":"192.0.2.1"}`); code != 200 {
		t.Errorf("first check: %d", code)
	}
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"r","key":"192.0.2.1"}`); code != 429 {
		t.Errorf("second check: %d, want 429", code)
	}
}

// TestServeRedisLater: sluice starts while Redis is down, the error policy
// decides meanwhile, and once Redis answers decisions are shared again.
func TestServeRedisLater(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	cfg := writeFile(t, `
redis:
  on_error: deny
rules:
  - {name: r, key: ip, limit: 5, period: 1m}
`)
	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", cfg)
	if code, _, body := d.post(t, "/v1/check", `{"rule":"r","key":"192.0.2.1"}`); code != 503 || !strings.Contains(body, "RATE_LIMITER_UNAVAILABLE") {
		t.Fatalf("with Redis down under deny: %d %s, want 503", code, body)
	}
	srv.Restart(t)
	// Bounded wait for the background reconnect; no speed is asserted.
	waitUntil(t, 20*time.Second, func() error {
		if code, _, body := d.post(t, "/v1/check", `{"rule":"r","key":"192.0.2.1"}`); code != 200 {
			return fmt.Errorf("Redis is back but checks still answer %d %s", code, body)
		}
		return nil
	})
	d.waitLog(t, "redis reachable")
}

// TestServeSIGTERMDuringTraffic: SIGTERM while clients are sending drains
// the requests in flight: every response that arrives is whole, and the
// process exits 0.
func TestServeSIGTERMDuringTraffic(t *testing.T) {
	srv := redistest.Start(t)
	cfg := writeFile(t, `
rules:
  - {name: r, key: ip, limit: 1000000, period: 1s}
`)
	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", cfg)
	client := &http.Client{Timeout: 10 * time.Second}
	type outcome struct {
		ok, torn int
	}
	results := make(chan outcome)
	stop := make(chan struct{})
	var answered atomic.Int64
	for range 8 {
		go func() {
			var o outcome
			for {
				select {
				case <-stop:
					results <- o
					return
				default:
				}
				resp, err := client.Post(d.base+"/v1/check", "application/json", strings.NewReader(`{"rule":"r","key":"192.0.2.1"}`))
				if err != nil {
					continue // refused once the listener closed: expected
				}
				var body struct {
					Allowed *bool `json:"allowed"`
				}
				if json.NewDecoder(resp.Body).Decode(&body) != nil || body.Allowed == nil {
					o.torn++
				} else {
					o.ok++
					answered.Add(1)
				}
				resp.Body.Close()
			}
		}()
	}
	waitUntil(t, 10*time.Second, func() error { // traffic flowing
		if n := answered.Load(); n < 50 {
			return fmt.Errorf("%d answers got through, want 50 before SIGTERM", n)
		}
		return nil
	})
	d.terminate(t)
	close(stop)
	var total outcome
	for range 8 {
		o := <-results
		total.ok += o.ok
		total.torn += o.torn
	}
	if total.ok == 0 || total.torn != 0 {
		t.Errorf("%d whole responses, %d torn; want some and none", total.ok, total.torn)
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// TestServePprof: --pprof-listen serves Go's profiles on a listener of its
// own, named in the serving log line; without it none is served.
func TestServePprof(t *testing.T) {
	cfg := writeFile(t, "rules:\n  - {name: r, key: ip, limit: 5, period: 1m}\n")
	d := startServe(t, nil, "--config", cfg, "--pprof-listen", "127.0.0.1:0")
	addrs := d.logValues("serving", "pprof")
	if len(addrs) != 1 || !strings.HasPrefix(addrs[0], "127.0.0.1:") {
		t.Fatalf("the serving line names pprof %q, want one loopback address", addrs)
	}
	resp, err := http.Get("http://" + addrs[0] + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "serve") {
		t.Errorf("/debug/pprof/cmdline: %d %q, want 200 and the command line", resp.StatusCode, body)
	}
	// Not on the service's own listener.
	resp, err = http.Get(d.base + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("the HTTP listener answers /debug/pprof/cmdline with %d, want 404", resp.StatusCode)
	}
}
