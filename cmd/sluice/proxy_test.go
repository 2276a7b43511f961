//go:build integration

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policyfile"
)

// startProxy starts `sluice proxy` with args on a free port and waits for
// its "proxying" log line.
func startProxy(t *testing.T, env []string, args ...string) *daemon {
	t.Helper()
	return startDaemon(t, "proxying", env, append([]string{"proxy"}, args...)...)
}

// echoed is what the test upstream's echo handler answers.
type echoed struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query"`
	Body   string `json:"body"`
	XFF    string `json:"xff"`
	XFHost string `json:"xf_host"`
	XFProt string `json:"xf_proto"`
	XReal  string `json:"x_real_ip"`
}

// upstream is a small upstream: every path echoes the request as JSON,
// except /stream, which sends a first chunk (with the Content-Type of its
// type parameter) and then waits for a value on release before sending
// the second. hits counts the requests that reached it.
type upstream struct {
	*httptest.Server
	hits     atomic.Int64
	release  chan struct{}
	finished atomic.Bool // the last /stream wrote its last chunk
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		if r.URL.Path == "/stream" {
			u.finished.Store(false)
			w.Header().Set("Content-Type", r.URL.Query().Get("type"))
			io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-u.release:
			case <-time.After(10 * time.Second):
			}
			u.finished.Store(true)
			io.WriteString(w, "data: second\n\n")
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(echoed{
			Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: string(body),
			XFF:    strings.Join(r.Header.Values("X-Forwarded-For"), ", "),
			XFHost: r.Header.Get("X-Forwarded-Host"), XFProt: r.Header.Get("X-Forwarded-Proto"),
			XReal: r.Header.Get("X-Real-IP"),
		})
	}))
	t.Cleanup(u.Close)
	return u
}

// do sends a request through the proxy and returns the response with its
// body read.
func do(t *testing.T, method, url, body string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func decodeEcho(t *testing.T, body string) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("upstream answer %q: %v", body, err)
	}
	return e
}

func TestProxy(t *testing.T) {
	up := startUpstream(t)
	cfg := writeFile(t, `
rules:
  - {name: limited, match: GET /limited, key: ip, limit: 2, period: 1m}
`)
	srv := redistest.Start(t)
	d := startProxy(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", cfg, "--upstream", up.URL, "--metrics-listen", "127.0.0.1:0")
	early := strings.Join(d.early, "\n")
	if !strings.Contains(early, `"upstream":"`+up.URL+`"`) {
		t.Errorf("the proxying line does not name the upstream:\n%s", early)
	}
	metricsAddr := regexp.MustCompile(`"metrics":"([^"]+)"`).FindStringSubmatch(early)
	if metricsAddr == nil {
		t.Fatalf("the proxying line does not name the metrics listener:\n%s", early)
	}

	t.Run("rate limited", func(t *testing.T) {
		before := up.hits.Load()
		for i := 1; i <= 2; i++ {
			resp, body := do(t, "GET", d.base+"/limited", "", nil)
			if resp.StatusCode != 200 || decodeEcho(t, body).Path != "/limited" {
				t.Fatalf("request %d: %d %s, want 200 from the upstream", i, resp.StatusCode, body)
			}
			if resp.Header.Get("RateLimit-Policy") == "" || resp.Header.Get("X-RateLimit-Limit") != "2" {
				t.Errorf("request %d: no rate-limit headers: %v", i, resp.Header)
			}
		}
		resp, body := do(t, "GET", d.base+"/limited", "", nil)
		if resp.StatusCode != 429 || !strings.Contains(body, `"RATE_LIMITED"`) || resp.Header.Get("Retry-After") == "" {
			t.Errorf("third request: %d %s, want 429 RATE_LIMITED with Retry-After", resp.StatusCode, body)
		}
		if hits := up.hits.Load() - before; hits != 2 {
			t.Errorf("upstream hits: %d, want 2 (the 429 must not reach it)", hits)
		}
		// Paths no rule matches pass unlimited.
		for i := 0; i < 3; i++ {
			if resp, body := do(t, "GET", d.base+"/free", "", nil); resp.StatusCode != 200 {
				t.Fatalf("unlimited path: %d %s", resp.StatusCode, body)
			}
		}
		// The metrics listener counts the decisions, and times the six
		// at the proxy door.
		resp, err := http.Get("http://" + metricsAddr[1] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			`sluice_decisions_total{outcome="allowed",rule="limited"} 2`,
			`sluice_decisions_total{outcome="denied",rule="limited"} 1`,
			`sluice_decisions_total{outcome="shadow_denied",rule="limited"} 0`,
			`sluice_decision_duration_seconds_count{door="proxy"} 6`,
		} {
			if !strings.Contains(string(text), want+"\n") {
				t.Errorf("the proxy's /metrics lacks %s", want)
			}
		}
	})

	t.Run("request preserved", func(t *testing.T) {
		h := http.Header{"X-Forwarded-For": {"203.0.113.9"}, "X-Real-Ip": {"203.0.113.9"}}
		resp, body := do(t, "POST", d.base+"/echo/path?a=1&b=two%20words", `{"hello":"world"}`, h)
		if resp.StatusCode != 200 {
			t.Fatalf("POST: %d %s", resp.StatusCode, body)
		}
		want := echoed{
			Method: "POST", Path: "/echo/path", Query: "a=1&b=two%20words", Body: `{"hello":"world"}`,
			// The peer is not a trusted proxy: its X-Forwarded-For and
			// X-Real-IP are dropped, not passed on as the client's address.
			XFF:    "127.0.0.1",
			XFHost: strings.TrimPrefix(d.base, "http://"), XFProt: "http",
		}
		if got := decodeEcho(t, body); got != want {
			t.Errorf("upstream saw %+v\nwant %+v", got, want)
		}
	})

	for _, ct := range []string{"text/event-stream", "text/plain"} {
		t.Run("streaming "+ct, func(t *testing.T) {
			resp, err := http.Get(d.base + "/stream?type=" + url.QueryEscape(ct))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			first, err := r.ReadString('\n')
			if err != nil || first != "data: first\n" {
				t.Fatalf("first chunk: %q, %v", first, err)
			}
			if up.finished.Load() {
				t.Fatal("the first chunk arrived only after the upstream handler finished: not streamed")
			}
			up.release <- struct{}{}
			rest, err := io.ReadAll(r)
			if err != nil || string(rest) != "\ndata: second\n\n" {
				t.Errorf("rest: %q, %v", rest, err)
			}
		})
	}

	// SIGTERM: a clean exit.
	if code := d.terminate(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d, want 0", code)
	}
}

// TestProxyTrustedPeer: a peer in trusted_proxies, written in IPv4 or
// IPv4-mapped IPv6 form, has its forwarding chain and X-Real-IP passed on.
func TestProxyTrustedPeer(t *testing.T) {
	up := startUpstream(t)
	for _, trusted := range []string{"127.0.0.1", "::ffff:127.0.0.0/104"} {
		t.Run(trusted, func(t *testing.T) {
			cfg := writeFile(t, `
http:
  trusted_proxies: ["`+trusted+`"]
rules:
  - {name: r, key: ip, limit: 100, period: 1m}
`)
			d := startProxy(t, nil, "--config", cfg, "--upstream", up.URL)
			h := http.Header{"X-Forwarded-For": {"203.0.113.9, 198.51.100.2"}, "X-Real-Ip": {"203.0.113.9"}}
			resp, body := do(t, "GET", d.base+"/x", "", h)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			got := decodeEcho(t, body)
			if want := "203.0.113.9, 198.51.100.2, 127.0.0.1"; got.XFF != want {
				t.Errorf("X-Forwarded-For from a trusted peer: %q, want %q", got.XFF, want)
			}
			if got.XReal != "203.0.113.9" {
				t.Errorf("X-Real-IP from a trusted peer: %q, want it passed on", got.XReal)
			}
		})
	}
}

// TestProxyRequestRules: a rule keyed by request, without match beside
// the default rule keyed by ip, is never applied to the proxy's requests,
// and the proxy says so when it starts; the ip rule limits them.
func TestProxyRequestRules(t *testing.T) {
	up := startUpstream(t)
	cfg := writeFile(t, `
rules:
  - {name: per-ip, limit: 2, period: 1h}
  - {name: teams, key: request, limit: 1, period: 1h}
  - {name: users, key: request, limit: 1, period: 1h}
`)
	d := startProxy(t, nil, "--config", cfg, "--upstream", up.URL)
	const note = `"msg":"rules keyed by request are checked by name, through sluice serve's POST /v1/check and gRPC: the proxy never applies them","rules":"teams,users"`
	if early := strings.Join(d.early, "\n"); !strings.Contains(early, note) {
		t.Errorf("the proxy's start logged\n%s\nwithout %s", early, note)
	}
	for i, want := range []int{200, 200, 429} {
		resp, body := do(t, "GET", d.base+"/x", "", nil)
		if resp.StatusCode != want || resp.Header.Get("RateLimit-Policy") != `"per-ip-1h";q=2;w=3600` {
			t.Errorf("request %d: %d %s %v, want %d under per-ip alone", i+1, resp.StatusCode, body, resp.Header, want)
		}
	}
}

func TestProxyUpstreamDown(t *testing.T) {
	up := startUpstream(t)
	upURL := up.URL
	up.Close()
	cfg := writeFile(t, `
rules:
  - {name: r, key: ip, limit: 100, period: 1m}
`)
	d := startProxy(t, nil, "--config", cfg, "--upstream", upURL)
	resp, body := do(t, "GET", d.base+"/x", "", nil)
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if resp.StatusCode != 502 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "UPSTREAM_UNAVAILABLE" {
		t.Fatalf("upstream down: %d %s, want 502 with JSON code UPSTREAM_UNAVAILABLE", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	u, _ := url.Parse(upURL)
	if strings.Contains(body, u.Host) || strings.Contains(body, u.Port()) {
		t.Errorf("the 502 body names the upstream %s: %s", u.Host, body)
	}
	// It is logged, for the operator.
	d.waitLog(t, "upstream unavailable")
}

func TestProxyUsage(t *testing.T) {
	cfg := writeFile(t, "rules:\n  - {name: r, key: ip, limit: 1, period: 1m}\n")
	tests := []struct {
		name   string
		env    []string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"missing upstream", nil, []string{"proxy", "--config", cfg}, 2, "", "--upstream is required"},
		{"not http", nil, []string{"proxy", "--config", cfg, "--upstream", "ftp://127.0.0.1:21"}, 2, "", "not an absolute http or https URL"},
		{"relative", nil, []string{"proxy", "--config", cfg, "--upstream", "/api"}, 2, "", "not an absolute http or https URL"},
		{"no scheme", nil, []string{"proxy", "--config", cfg, "--upstream", "127.0.0.1:3000"}, 2, "", "--upstream"},
		{"bad upstream from env", []string{"SLUICE_UPSTREAM=localhost"}, []string{"proxy", "--config", cfg}, 2, "", "not an absolute http or https URL"},
		{"envoyproxy config", nil, []string{"proxy", "--config", "../../examples/envoy/config", "--upstream", "http://127.0.0.1:3000"}, 2, "", "is a directory or an envoyproxy/ratelimit file, which only Envoy's rate limit service of sluice serve answers"},
		{"help", nil, []string{"proxy", "--help"}, 0, "SLUICE_UPSTREAM", ""},
		{"listed", nil, []string{"help"}, 0, "proxy", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runBinary(t, tt.env, tt.args...)
			if code != tt.code || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

// TestProxyReload: the proxy takes a changed policy file without a
// restart.
func TestProxyReload(t *testing.T) {
	up := startUpstream(t)
	cfg := writeFile(t, `
rules:
  - {name: before, key: ip, limit: 100, period: 1m}
`)
	d := startProxy(t, nil, "--config", cfg, "--upstream", up.URL, "--reload-interval", "100ms")
	policy := func() string {
		resp, _ := do(t, "GET", d.base+"/x", "", nil)
		return resp.Header.Get("RateLimit-Policy")
	}
	if got := policy(); !strings.Contains(got, `"before-1m"`) {
		t.Fatalf("RateLimit-Policy %q before the reload", got)
	}
	if err := os.WriteFile(cfg, []byte("rules:\n  - {name: after, key: ip, limit: 100, period: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() error {
		if got := policy(); !strings.Contains(got, `"after-1m"`) {
			return fmt.Errorf("the proxy still applies the old rules: %q", got)
		}
		return nil
	})
}

// TestProxyReloadTrustedProxies: a reload that drops trusted_proxies stops
// the forwarder passing on a client-made X-Forwarded-For chain, as the
// limiter already does.
func TestProxyReloadTrustedProxies(t *testing.T) {
	up := startUpstream(t)
	cfg := writeFile(t, `
http:
  trusted_proxies: [127.0.0.1]
rules:
  - {name: r, key: ip, limit: 100, period: 1m}
`)
	d := startProxy(t, nil, "--config", cfg, "--upstream", up.URL, "--reload-interval", "100ms")
	h := http.Header{"X-Forwarded-For": {"203.0.113.9"}, "X-Real-Ip": {"203.0.113.9"}}
	_, body := do(t, "GET", d.base+"/x", "", h)
	if got, want := decodeEcho(t, body).XFF, "203.0.113.9, 127.0.0.1"; got != want {
		t.Fatalf("X-Forwarded-For from a trusted peer: %q, want %q", got, want)
	}
	if err := os.WriteFile(cfg, []byte("rules:\n  - {name: r, key: ip, limit: 100, period: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.waitLog(t, "config reloaded")
	_, body = do(t, "GET", d.base+"/x", "", h)
	got := decodeEcho(t, body)
	if got.XFF != "127.0.0.1" || got.XReal != "" {
		t.Errorf("after trusted_proxies was removed, the upstream saw X-Forwarded-For %q and X-Real-IP %q, want %q and none",
			got.XFF, got.XReal, "127.0.0.1")
	}
}

// TestProxyDoorTime: the proxy door records each request once, admitted
// or refused, and the time of an admitted one ends where it is handed to
// the upstream: an upstream that takes a second is not in it.
func TestProxyDoorTime(t *testing.T) {
	cfg := writeFile(t, `
rules:
  - {name: limited, match: GET /, key: ip, limit: 1, period: 1h}
`)
	p, err := policyfile.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := metrics.New()
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Second)
		w.WriteHeader(http.StatusNoContent)
	})
	h := timeProxy(m, p.Middleware, upstream)
	for _, want := range []int{http.StatusNoContent, http.StatusTooManyRequests} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Fatalf("answer %d, want %d", w.Code, want)
		}
	}
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`sluice_decision_duration_seconds_count{door="proxy"} 2`,
		// Both decided well within half a second (a generous bound):
		// the upstream's second is not the decision's.
		`sluice_decision_duration_seconds_bucket{door="proxy",le="0.5"} 2`,
	} {
		if !strings.Contains(w.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(w.Body.String(), `door="proxy"`))
		}
	}
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
