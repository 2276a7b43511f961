// Package frameworktest checks the framework examples. Each example's
// router, its requests passed through sluice's net/http middleware, must
// admit exactly what the tiers of ../sluice.yaml admit, and answer every
// request as the same API on net/http's ServeMux under httplimit does:
// the same statuses, the same rate-limit header fields, the same 429s.
// Both are served over real loopback listeners.
package frameworktest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/examples/frameworks/internal/demo"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// PolicyFile is the examples' policy file, as an example's test (run in
// the example's directory) names it.
const PolicyFile = "../sluice.yaml"

// At is the instant of every decision Check makes, so that every header
// field is known to the second: 2026-01-01T00:00:00Z, 1767225600 in Unix
// seconds.
var At = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewRouter is what each example hands its test: its API, routed by its
// framework, with every request passed through limit first.
type NewRouter func(limit func(http.Handler) http.Handler) http.Handler

// Run is an example's run function: it serves the API with the flags of
// args (-config, -listen), printing "listening on http://<address>" to
// stdout, until ctx ends.
type Run func(ctx context.Context, args []string, stdout io.Writer) error

// Limit returns sluice's net/http middleware (httplimit.New, with the
// options of the file's http section) under the rules of PolicyFile, on a
// fresh in-memory store, deciding every request at At.
func Limit(t testing.TB) func(http.Handler) http.Handler {
	t.Helper()
	file, err := config.Load(PolicyFile)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := file.Compile()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := httplimit.FromConfig(file.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	at := func() time.Time { return At }
	engine := policy.New(sluice.New(memory.New(), sluice.WithClock(at)), rules, policy.WithLogger(slog.New(slog.DiscardHandler)))
	return httplimit.New(engine, append(opts, httplimit.WithClock(at))...)
}

// Reference returns the API every example routes, on an http.ServeMux,
// with every request passed through limit first.
func Reference(limit func(http.Handler) http.Handler) http.Handler {
	mux := http.NewServeMux()
	reply := func(v map[string]string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	mux.Handle("GET /healthz", reply(map[string]string{"status": "ok"}))
	mux.Handle("GET /api/items", reply(map[string]string{"route": "items"}))
	mux.HandleFunc("GET /api/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(map[string]string{"route": "item", "id": r.PathValue("id")})(w, r)
	})
	mux.Handle("POST /api/auth/login", reply(map[string]string{"route": "login"}))
	return limit(mux)
}

// Fields are the header fields sluice writes on a limited response.
var Fields = []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}

// bodyFields are the header fields of the body sluice writes, a 429's.
var bodyFields = []string{"Content-Type", "X-Content-Type-Options", "Cache-Control"}

// A step sends n requests, in order, of which the first admitted pass
// sluice (and get status and, unless it is nil, body from the API) and
// the others get 429. last holds the exact value of each of Fields on the
// step's last response ("" for a field it must not carry).
type step struct {
	name         string
	method, path string
	n, admitted  int
	status       int
	body         map[string]string
	last         map[string]string
}

// retry returns the exact 429 body of httplimit for a Retry-After of secs.
func retry(secs int) string {
	return `{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded; retry after ` + strconv.Itoa(secs) +
		` seconds","retry_after":` + strconv.Itoa(secs) + "}}\n"
}

// noFields is the last of a step whose responses carry no rate-limit
// fields: no rule matches them.
var noFields = map[string]string{"RateLimit-Policy": "", "RateLimit": "", "X-RateLimit-Limit": "", "X-RateLimit-Remaining": "", "X-RateLimit-Reset": "", "Retry-After": ""}

// steps are the requests Check sends, in order, all from 127.0.0.1 and at
// At: the api rule's token bucket (10 a minute, one token every 6s) and
// the login rule's log (3 a minute) with the numbers they must give.
var steps = []step{
	{
		name: "health is unlimited", method: "GET", path: "/healthz", n: 20, admitted: 20,
		status: 200, body: map[string]string{"status": "ok"}, last: noFields,
	},
	{
		// Each login spends from both rules; the 4th is denied by the
		// login rule, and spends from neither.
		name: "login: 3 a minute", method: "POST", path: "/api/auth/login", n: 4, admitted: 3,
		status: 200, body: map[string]string{"route": "login"},
		last: map[string]string{
			"RateLimit-Policy":      `"api-1m";q=10;w=60, "login-1m";q=3;w=60`,
			"RateLimit":             `"api-1m";r=7;t=18, "login-1m";r=0;t=60`,
			"X-RateLimit-Limit":     "3",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "1767225660",
			"Retry-After":           "60",
		},
	},
	{
		// The api rule had 7 left: the denied login took none.
		name: "api: 10 a minute", method: "GET", path: "/api/items/42", n: 8, admitted: 7,
		status: 200, body: map[string]string{"route": "item", "id": "42"},
		last: map[string]string{
			"RateLimit-Policy":      `"api-1m";q=10;w=60`,
			"RateLimit":             `"api-1m";r=0;t=6`,
			"X-RateLimit-Limit":     "10",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "1767225660",
			"Retry-After":           "6",
		},
	},
	{
		name: "api: one count for every route", method: "GET", path: "/api/items", n: 1, admitted: 0,
		last: map[string]string{
			"RateLimit":   `"api-1m";r=0;t=6`,
			"Retry-After": "6",
		},
	},
	{
		// Both rules deny: Retry-After is the longer wait, login's.
		name: "login: both rules deny", method: "POST", path: "/api/auth/login", n: 1, admitted: 0,
		last: map[string]string{
			"RateLimit":         `"api-1m";r=0;t=6, "login-1m";r=0;t=60`,
			"X-RateLimit-Limit": "3",
			"Retry-After":       "60",
		},
	},
	{
		name: "health is still unlimited", method: "GET", path: "/healthz", n: 3, admitted: 3,
		status: 200, body: map[string]string{"status": "ok"}, last: noFields,
	},
	{
		// No rule matches: the framework's own 404, unlimited.
		name: "unknown route", method: "GET", path: "/nope", n: 2, admitted: 2,
		status: 404, last: noFields,
	},
}

// response is what a test keeps of a response.
type response struct {
	status int
	header http.Header
	body   []byte
}

// send sends a request to base and reads the whole response.
func send(t *testing.T, client *http.Client, method, url string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, body}
}

// Check serves newRouter and Reference, each limited by a Limit of its
// own, over loopback, sends both the requests of steps, and fails t unless
// the example admits exactly what steps say, with exactly their header
// fields, and answers every request as Reference does: the same status,
// the same rate-limit fields, and for a 429 the same body and body fields.
func Check(t *testing.T, newRouter NewRouter) {
	t.Helper()
	example := httptest.NewServer(newRouter(Limit(t)))
	defer example.Close()
	ref := httptest.NewServer(Reference(Limit(t)))
	defer ref.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	for _, s := range steps {
		var got response
		admitted := 0
		for i := range s.n {
			got = send(t, client, s.method, example.URL+s.path)
			want := send(t, client, s.method, ref.URL+s.path)
			where := fmt.Sprintf("%s: %s %s #%d", s.name, s.method, s.path, i+1)
			if got.status != want.status {
				t.Errorf("%s: status %d, net/http under httplimit answers %d", where, got.status, want.status)
			}
			for _, f := range Fields {
				if g, w := got.header.Values(f), want.header.Values(f); !slices.Equal(g, w) {
					t.Errorf("%s: %s %q, httplimit writes %q", where, f, g, w)
				}
			}
			if got.status == http.StatusTooManyRequests {
				for _, f := range bodyFields {
					if g, w := got.header.Values(f), want.header.Values(f); !slices.Equal(g, w) {
						t.Errorf("%s: 429 %s %q, httplimit writes %q", where, f, g, w)
					}
				}
				if !bytes.Equal(got.body, want.body) {
					t.Errorf("%s: 429 body %q, httplimit writes %q", where, got.body, want.body)
				}
				continue
			}
			if got.status != s.status {
				t.Errorf("%s: status %d, want %d", where, got.status, s.status)
				continue
			}
			admitted++
			if s.body == nil {
				continue
			}
			var body map[string]string
			if err := json.Unmarshal(got.body, &body); err != nil || !mapsEqual(body, s.body) {
				t.Errorf("%s: body %q, want the JSON of %v", where, got.body, s.body)
			}
		}
		if admitted != s.admitted {
			t.Errorf("%s: %d of %d admitted, want %d", s.name, admitted, s.n, s.admitted)
		}
		for f, want := range s.last {
			if g := got.header.Get(f); g != want {
				t.Errorf("%s: last response's %s %q, want %q", s.name, f, g, want)
			}
		}
		if s.admitted < s.n {
			secs, _ := strconv.Atoi(s.last["Retry-After"])
			if got.status != http.StatusTooManyRequests || string(got.body) != retry(secs) {
				t.Errorf("%s: last response %d %q, want 429 %q", s.name, got.status, got.body, retry(secs))
			}
		}
	}
}

// mapsEqual reports whether a and b hold the same entries.
func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// start runs run with the examples' policy file on a free loopback port
// and returns the base URL it serves; when t ends it cancels run's context
// and fails t unless run returns nil within 10 seconds.
func start(t *testing.T, run Run) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, in := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-config", PolicyFile, "-listen", "127.0.0.1:0"}, in)
		in.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("run returned %v after its context ended, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return within 10s of its context's end")
		}
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case line := <-lines:
		base, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
		if !ok {
			t.Fatalf("the example printed %q, want its address", line)
		}
		return base
	case err := <-errc:
		t.Fatalf("run returned before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the example did not start within 30s")
	}
	return ""
}

// logins sends n logins to base and returns their responses.
func logins(t *testing.T, base string, n int) []response {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	out := make([]response, n)
	for i := range out {
		out[i] = send(t, client, "POST", base+"/api/auth/login")
	}
	return out
}

// checkDenied fails t unless r is the 429 of the login rule: Retry-After
// at most its minute, and the body httplimit writes for it.
func checkDenied(t *testing.T, where string, r response) {
	t.Helper()
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	if r.status != http.StatusTooManyRequests || err != nil || secs < 1 || secs > 60 || string(r.body) != retry(secs) {
		t.Errorf("%s: %d Retry-After %q %q, want 429 with Retry-After 1..60 and %q", where, r.status, r.header.Get("Retry-After"), r.body, retry(secs))
	}
	if !strings.Contains(r.header.Get("RateLimit"), `"login-1m";r=0;`) {
		t.Errorf("%s: RateLimit %q, want login-1m with r=0", where, r.header.Get("RateLimit"))
	}
}

// CheckMain runs an example's main (its run function, as main calls it)
// on the in-memory store, over loopback, and fails t unless it admits
// exactly 3 logins and denies the 4th as httplimit does, and stops when
// its context ends.
func CheckMain(t *testing.T, run Run) {
	t.Setenv(demo.RedisURLEnv, "") // the in-memory store, whatever the caller's environment says
	base := start(t, run)
	got := logins(t, base, 4)
	for i, r := range got[:3] {
		if r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Errorf("login %d: %d X-RateLimit-Remaining %q, want 200 with %d", i+1, r.status, r.header.Get("X-RateLimit-Remaining"), 2-i)
		}
	}
	checkDenied(t, "login 4", got[3])
}

// CheckMainRedis runs two replicas of an example's main on one real
// redis-server named by SLUICE_REDIS_URL, and fails t unless they share
// the login rule's 3 a minute. It skips t under -short.
func CheckMainRedis(t *testing.T, run Run) {
	srv := redistest.Start(t)
	t.Setenv(demo.RedisURLEnv, "redis://"+srv.Addr)
	a, b := start(t, run), start(t, run)
	admitted := 0
	for _, r := range append(logins(t, a, 2), logins(t, b, 1)...) {
		if r.status == http.StatusOK {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("2 logins on one replica and 1 on the other: %d admitted, want 3", admitted)
	}
	checkDenied(t, "login 4, on the first replica", logins(t, a, 1)[0])
	checkDenied(t, "login 5, on the second replica", logins(t, b, 1)[0])
}
