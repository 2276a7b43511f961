//go:build integration

package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// startService builds and starts the example service on a free port,
// against the Redis server at redisURL, and returns its base URL. It stops
// the process (by pid) when the test ends.
func startService(t *testing.T, redisURL string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "service")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-config", "../sluice.yaml", "-listen", "127.0.0.1:0", "-redis", redisURL)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
	}()
	select {
	case line := <-lines:
		base, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
		if !ok {
			t.Fatalf("service printed %q, want its address", line)
		}
		return base
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not start within 30s")
	}
	return ""
}

// TestService drives the example service, on Redis, with real HTTP
// clients: the tiers of examples/sluice.yaml, their headers, their 429s.
func TestService(t *testing.T) {
	srv := redistest.Start(t)
	base := startService(t, "redis://"+srv.Addr)
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(method, path string, header map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	t.Run("login", func(t *testing.T) {
		// A burst of 5, then 429: the login tier (1 per second, burst 5: q is the rate).
		for i := range 5 {
			resp := send("POST", "/api/auth/login", nil)
			if resp.StatusCode != 200 {
				t.Fatalf("login %d: %s", i+1, resp.Status)
			}
			if got := resp.Header.Get("RateLimit-Policy"); got != `"login-1s";q=1;w=1, "login-1h";q=20;w=3600` {
				t.Fatalf("RateLimit-Policy %q", got)
			}
		}
		resp := send("POST", "/api/auth/login", nil)
		if resp.StatusCode != 429 {
			t.Fatalf("sixth login: %s, want 429", resp.Status)
		}
		if resp.Header.Get("Retry-After") != "1" || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"login-1s";r=0;`) {
			t.Errorf("429 headers: Retry-After %q, RateLimit %q", resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"))
		}
		var body struct {
			Error struct {
				Code       string `json:"code"`
				RetryAfter int    `json:"retry_after"`
			} `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error.Code != "RATE_LIMITED" || body.Error.RetryAfter != 1 {
			t.Errorf("429 body: %+v, %v", body, err)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("429 Content-Type %q", ct)
		}
	})
	t.Run("orders need a key, and a paid key gets 10x", func(t *testing.T) {
		if resp := send("POST", "/api/orders", nil); resp.StatusCode != 401 {
			t.Errorf("order without X-API-Key: %s, want 401", resp.Status)
		}
		// A full bucket admits its burst at once: 10 for a free key, 100
		// for the paid one, each told its own limit.
		for _, tt := range []struct {
			key   string
			burst int
		}{{"free-key", 10}, {"pro-key-1", 100}} {
			for i := range tt.burst {
				resp := send("POST", "/api/orders", map[string]string{"X-API-Key": tt.key})
				if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != strconv.Itoa(tt.burst) {
					t.Fatalf("%s, order %d: %s, X-RateLimit-Limit %q; want 200 and %d", tt.key, i+1, resp.Status, resp.Header.Get("X-RateLimit-Limit"), tt.burst)
				}
			}
		}
	})
	t.Run("status and default tiers", func(t *testing.T) {
		if resp := send("GET", "/api/status", nil); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "1000" {
			t.Errorf("status: %s, X-RateLimit-Limit %q, want 1000", resp.Status, resp.Header.Get("X-RateLimit-Limit"))
		}
		if resp := send("GET", "/anything", nil); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "100" {
			t.Errorf("default: %s, X-RateLimit-Limit %q, want 100", resp.Status, resp.Header.Get("X-RateLimit-Limit"))
		}
	})
}
