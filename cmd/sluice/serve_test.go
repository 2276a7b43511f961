package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/redistest"
)

// daemon is a running `sluice serve` or `sluice proxy`.
type daemon struct {
	cmd   *exec.Cmd
	base  string        // http://host:port
	grpc  string        // host:port of the gRPC listener, if any
	early []string      // log lines up to the ready line
	logs  chan string   // its later log lines, JSON
	done  chan struct{} // closed when it exits
}

// startServe starts `sluice serve` with args on free ports and waits for
// its "serving" log line.
func startServe(t *testing.T, env []string, args ...string) *daemon {
	t.Helper()
	return startDaemon(t, "serving", env, append([]string{"serve", "--grpc-listen", "127.0.0.1:0"}, args...)...)
}

// startDaemon runs the binary with args (a subcommand and its flags), on a
// free port and with JSON logs, and waits for the log line whose msg is
// ready, which names its addresses. The process is killed when t ends.
func startDaemon(t *testing.T, ready string, env []string, args ...string) *daemon {
	t.Helper()
	flags := append([]string{args[0], "--listen", "127.0.0.1:0", "--log-format", "json"}, args[1:]...)
	cmd := exec.Command(binary, flags...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, logs: make(chan string, 100), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case d.logs <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.done
	})
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line := <-d.logs:
			d.early = append(d.early, line)
			var entry struct {
				Msg  string `json:"msg"`
				HTTP string `json:"http"`
				GRPC string `json:"grpc"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == ready {
				d.base, d.grpc = "http://"+entry.HTTP, entry.GRPC
				return d
			}
		case <-d.done:
			t.Fatalf("sluice %s exited before %q:\n%s", args[0], ready, strings.Join(d.early, "\n"))
		case <-deadline:
			t.Fatalf("sluice %s did not log %q within 30s", args[0], ready)
		}
	}
}

// terminate sends SIGTERM and waits for the daemon to exit, failing t
// after 20s; it returns the exit code.
func (d *daemon) terminate(t *testing.T) int {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("sluice %s did not exit within 20s of SIGTERM", d.cmd.Args[1])
	}
	return d.cmd.ProcessState.ExitCode()
}

func (d *daemon) post(t *testing.T, path, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(d.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestServe(t *testing.T) {
	srv := redistest.Start(t)
	cfg := writeFile(t, `
redis:
  on_error: deny
rules:
  - {name: login, match: POST /login, key: ip, limit: 2, period: 1m, algorithm: sliding_log}
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
		{"negative cost", `{"rule":"login","key":"k","cost":-1}`, 400, "cost"},
		{"huge cost", `{"rule":"login","key":"k","cost":1000000}`, 400, "cost"},
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
	// Prometheus metrics count what happened.
	resp0, err := http.Get(d.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsText, _ := io.ReadAll(resp0.Body)
	resp0.Body.Close()
	for _, want := range []string{
		`sluice_decisions_total{outcome="allowed",rule="login"} 2`,
		`sluice_decisions_total{outcome="denied",rule="login"} 1`,
		`sluice_store_duration_seconds_count{op="take"} 3`,
	} {
		if !strings.Contains(string(metricsText), want) {
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
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"login","key":"x"}`); code != 503 {
		t.Errorf("check with Redis down under deny: %d, want 503", code)
	}
	timeout := time.After(10 * time.Second)
	for logged := false; !logged; {
		select {
		case line := <-d.logs:
			logged = strings.Contains(line, "store failing")
		case <-timeout:
			t.Fatal("no log line saying the store is failing")
		}
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
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"r","key":"a"}`); code != 200 {
		t.Errorf("first check: %d", code)
	}
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"r","key":"a"}`); code != 429 {
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
	if code, _, body := d.post(t, "/v1/check", `{"rule":"r","key":"a"}`); code != 503 || !strings.Contains(body, "RATE_LIMITER_UNAVAILABLE") {
		t.Fatalf("with Redis down under deny: %d %s, want 503", code, body)
	}
	srv.Restart(t)
	// Bounded wait for the background reconnect; no speed is asserted.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, body := d.post(t, "/v1/check", `{"rule":"r","key":"a"}`)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis is back but checks still answer %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line := <-d.logs:
			if strings.Contains(line, "redis reachable") {
				return
			}
		case <-timeout:
			t.Fatal("no log line saying Redis became reachable")
		}
	}
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
				resp, err := client.Post(d.base+"/v1/check", "application/json", strings.NewReader(`{"rule":"r","key":"k"}`))
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
	for deadline := time.Now().Add(10 * time.Second); answered.Load() < 50; { // traffic flowing
		if time.Now().After(deadline) {
			t.Fatal("no traffic got through")
		}
		time.Sleep(10 * time.Millisecond)
	}
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
