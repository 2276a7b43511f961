package httplimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// fixture is a handler behind the middleware, on the memory store and a
// fake clock.
type fixture struct {
	t     *testing.T
	clock *storetest.Clock
	h     http.Handler
}

// compile returns the rules of a policy file, compiled with opts.
func compile(t *testing.T, yaml string, opts ...policy.Option) *policy.RuleSet {
	t.Helper()
	f, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	set, err := f.Compile(opts...)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return set
}

// quiet discards the engine's logs.
var quiet = policy.WithLogger(slog.New(slog.DiscardHandler))

// setup serves the rules of yaml on the memory store.
func setup(t *testing.T, yaml string, opts ...httplimit.Option) *fixture {
	t.Helper()
	clock := storetest.NewClock()
	return serve(t, clock, policy.New(newLimiter(clock), compile(t, yaml), quiet), opts...)
}

// newLimiter returns a limiter on the memory store, reading clock.
func newLimiter(clock *storetest.Clock) *sluice.Limiter {
	return sluice.New(memory.New(memory.WithClock(clock.Now)), sluice.WithClock(clock.Now))
}

// serve puts a handler answering "ok" behind the middleware deciding
// with e.
func serve(t *testing.T, clock *storetest.Clock, e *policy.Engine, opts ...httplimit.Option) *fixture {
	t.Helper()
	mw := httplimit.New(e, append([]httplimit.Option{httplimit.WithClock(clock.Now)}, opts...)...)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	return &fixture{t: t, clock: clock, h: mw(next)}
}

// req describes one request.
type req struct {
	method, target string
	remote         string // default 192.0.2.1:1234
	header         map[string]string
}

func (f *fixture) do(q req) *httptest.ResponseRecorder {
	if q.method == "" {
		q.method = http.MethodGet
	}
	r := httptest.NewRequest(q.method, q.target, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if q.remote != "" {
		r.RemoteAddr = q.remote
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// policy returns the names in a RateLimit-Policy header.
func policyNames(w *httptest.ResponseRecorder) []string {
	var names []string
	for _, item := range strings.Split(w.Header().Get("RateLimit-Policy"), ",") {
		item = strings.TrimSpace(item)
		if i := strings.Index(item, ";"); i > 0 {
			names = append(names, strings.Trim(item[:i], `"`))
		}
	}
	return names
}

func TestPrecedence(t *testing.T) {
	f := setup(t, `
rules:
  - {name: api, match: /api/, key: ip, limit: 100, period: 1m}
  - {name: search, match: /api/search, key: ip, limit: 100, period: 1m}
  - {name: getsearch, match: GET /api/search, key: ip, limit: 100, period: 1m}
  - {name: item, match: "GET /api/items/{id}", key: ip, limit: 100, period: 1m}
  - {name: host, match: "api.example.com/api/search", key: ip, limit: 100, period: 1m}
  - {name: fallback, key: ip, limit: 100, period: 1m}
`)
	tests := []struct {
		method, target string
		want           string
	}{
		{"GET", "/api/search", "getsearch-1m"},
		{"HEAD", "/api/search", "getsearch-1m"}, // GET patterns match HEAD, as in ServeMux
		{"POST", "/api/search", "search-1m"},
		{"GET", "/api/items/42", "item-1m"},
		{"DELETE", "/api/items/42", "api-1m"},
		{"GET", "/api/other", "api-1m"},
		{"GET", "/elsewhere", "fallback-1m"},
		{"GET", "http://api.example.com/api/search", "host-1m"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			w := f.do(req{method: tt.method, target: tt.target})
			if got := policyNames(w); len(got) != 1 || got[0] != tt.want {
				t.Errorf("policies %q (RateLimit-Policy %q), want %s", got, w.Header().Get("RateLimit-Policy"), tt.want)
			}
		})
	}
	t.Run("spellings ServeMux would redirect", func(t *testing.T) {
		g := setup(t, `
rules:
  - {name: login, match: POST /api/auth/login, key: ip, limit: 1, period: 1h}
  - {name: items, match: /api/items/, key: ip, limit: 1, period: 1h}
  - {name: fallback, key: ip, limit: 1000, period: 1s}
`)
		for _, target := range []string{"/api/auth/login", "//api/auth/login", "/api/auth/./login", "/api//auth/login", "/api/x/../auth/login"} {
			w := g.do(req{method: "POST", target: target, remote: "198.51.100.1:1"})
			if got := policyNames(w); len(got) != 1 || got[0] != "login-1h" {
				t.Errorf("POST %s: policies %q, want login-1h", target, got)
			}
		}
		if w := g.do(req{target: "/api/items"}); len(policyNames(w)) != 1 || policyNames(w)[0] != "items-1h" {
			t.Errorf("GET /api/items (redirected to /api/items/): policies %q, want items-1h", policyNames(w))
		}
	})
	t.Run("no rule", func(t *testing.T) {
		g := setup(t, `
rules:
  - {name: only, match: /api/, key: ip, limit: 1, period: 1m}
`)
		for range 3 {
			if w := g.do(req{target: "/public"}); w.Code != 200 || w.Header().Get("RateLimit-Policy") != "" {
				t.Fatalf("unmatched request: %d %v; want 200 without rate-limit headers", w.Code, w.Header())
			}
		}
	})
}

func TestKeySources(t *testing.T) {
	f := setup(t, `
rules:
  - {name: byheader, match: /h, key: "header:X-API-Key", limit: 1, period: 1m}
  - {name: byquery, match: /q, key: "query:api_key", limit: 1, period: 1m}
  - {name: byip, match: /ip, key: ip, limit: 1, period: 1m}
  - {name: global, match: /g, key: global, limit: 1, period: 1m}
  - {name: denymissing, match: /d, key: "header:X-API-Key", missing_key: deny, limit: 1, period: 1m}
  - {name: ipmissing, match: /i, key: "header:X-API-Key", missing_key: ip, limit: 1, period: 1m}
`)
	tests := []struct {
		name  string
		first req
		same  req // a request with the same key: denied
		other req // a request with another key: allowed
	}{
		{"header", req{target: "/h", header: map[string]string{"X-API-Key": "a"}}, req{target: "/h", header: map[string]string{"X-API-Key": "a"}, remote: "198.51.100.9:1"}, req{target: "/h", header: map[string]string{"X-API-Key": "b"}}},
		{"query", req{target: "/q?api_key=a"}, req{target: "/q?api_key=a", remote: "198.51.100.9:1"}, req{target: "/q?api_key=b"}},
		{"ip", req{target: "/ip"}, req{target: "/ip", header: map[string]string{"X-Forwarded-For": "203.0.113.5"}}, req{target: "/ip", remote: "198.51.100.9:1"}},
		{"ip fallback", req{target: "/i"}, req{target: "/i"}, req{target: "/i", header: map[string]string{"X-API-Key": "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if w := f.do(tt.first); w.Code != 200 {
				t.Fatalf("first request: %d", w.Code)
			}
			if w := f.do(tt.same); w.Code != 429 {
				t.Errorf("same key: %d, want 429", w.Code)
			}
			if w := f.do(tt.other); w.Code != 200 {
				t.Errorf("other key: %d, want 200", w.Code)
			}
		})
	}
	t.Run("global", func(t *testing.T) {
		if w := f.do(req{target: "/g"}); w.Code != 200 {
			t.Fatalf("first: %d", w.Code)
		}
		if w := f.do(req{target: "/g", remote: "198.51.100.9:1"}); w.Code != 429 {
			t.Errorf("another client on a global rule: %d, want 429", w.Code)
		}
	})
	t.Run("missing key rejected", func(t *testing.T) {
		w := f.do(req{target: "/h"})
		var body struct {
			Error struct{ Code, Message string }
		}
		if w.Code != 401 || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Error.Code != "MISSING_KEY" || !strings.Contains(body.Error.Message, "header:X-Api-Key") {
			t.Errorf("missing header: %d %s; want 401 MISSING_KEY naming the header", w.Code, w.Body)
		}
	})
	t.Run("missing key denied", func(t *testing.T) {
		// 429, but no Retry-After: waiting would not bring the key.
		w := f.do(req{target: "/d"})
		if w.Code != 429 || w.Header().Get("Retry-After") != "" || !strings.Contains(w.Body.String(), "MISSING_KEY") {
			t.Errorf("missing header with missing_key deny: %d %v %s; want 429 MISSING_KEY without Retry-After", w.Code, w.Header(), w.Body)
		}
	})
	t.Run("key not UTF-8", func(t *testing.T) {
		// 400, never passed through unlimited, whatever missing_key says.
		for _, q := range []req{
			{target: "/h", header: map[string]string{"X-API-Key": "a\xff"}},
			{target: "/q?api_key=%C3"},
			{target: "/i", header: map[string]string{"X-API-Key": "\xfe"}},
		} {
			w := f.do(q)
			var body struct {
				Error struct{ Code, Message string }
			}
			if w.Code != 400 || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Error.Code != "INVALID_KEY" || !strings.Contains(body.Error.Message, "not valid UTF-8") {
				t.Errorf("%s %v: %d %s; want 400 INVALID_KEY saying not valid UTF-8", q.target, q.header, w.Code, w.Body)
			}
		}
	})
	t.Run("custom key function", func(t *testing.T) {
		type userKey struct{}
		clock := storetest.NewClock()
		set := compile(t, `
rules:
  - {name: user, match: /u, key: ip, limit: 1, period: 1m}
`, policy.WithKey("user", func(r *http.Request) (string, bool) {
			u, ok := r.Context().Value(userKey{}).(string)
			return u, ok
		}))
		g := serve(t, clock, policy.New(newLimiter(clock), set, quiet))
		as := func(user string) int {
			r := httptest.NewRequest("GET", "/u", nil)
			if user != "" {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
			}
			w := httptest.NewRecorder()
			g.h.ServeHTTP(w, r)
			return w.Code
		}
		// Anonymous requests fall back to the rule's own key: the address.
		if a1, a2, b, anon1, anon2 := as("alice"), as("alice"), as("bob"), as(""), as(""); a1 != 200 || a2 != 429 || b != 200 || anon1 != 200 || anon2 != 429 {
			t.Errorf("alice %d, alice again %d, bob %d, anonymous %d and %d; want 200 429 200 200 429", a1, a2, b, anon1, anon2)
		}
	})
}

func TestTrustedProxies(t *testing.T) {
	clock := storetest.NewClock()
	set := compile(t, `
rules:
  - {name: login, match: /login, key: ip, limit: 1, period: 1m}
`, policy.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")))
	f := serve(t, clock, policy.New(newLimiter(clock), set, quiet))
	via := func(xff string) int {
		return f.do(req{target: "/login", remote: "10.0.0.7:5555", header: map[string]string{"X-Forwarded-For": xff}}).Code
	}
	if got := via("203.0.113.5"); got != 200 {
		t.Fatalf("first request through the proxy: %d", got)
	}
	// The same client prepends made-up addresses: the proxy appended its
	// real address, which is what counts.
	for _, spoof := range []string{"1.1.1.1, 203.0.113.5", "9.9.9.9, 8.8.8.8, 203.0.113.5"} {
		if got := via(spoof); got != 429 {
			t.Errorf("spoofed X-Forwarded-For %q: %d, want 429 (same client)", spoof, got)
		}
	}
	if got := via("198.51.100.2"); got != 200 {
		t.Errorf("another client through the proxy: %d, want 200", got)
	}
	// An untrusted peer's X-Forwarded-For is ignored.
	direct := func(xff string) int {
		return f.do(req{target: "/login", remote: "192.0.2.50:1", header: map[string]string{"X-Forwarded-For": xff}}).Code
	}
	if a, b := direct("1.1.1.1"), direct("2.2.2.2"); a != 200 || b != 429 {
		t.Errorf("untrusted peer with changing X-Forwarded-For: %d then %d, want 200 then 429", a, b)
	}
}

func TestPlans(t *testing.T) {
	f := setup(t, `
rules:
  - name: api
    match: /api/
    key: "header:X-API-Key"
    limit: 2
    period: 1s
    plans:
      - {name: pro, keys: [gold-1], limit: 20, period: 1s}
      - {name: partner, prefixes: ["partner-"], limit: 10, period: 1s}
`)
	tests := []struct {
		key    string
		policy string
		admits int
	}{
		{"free-1", `"api-1s";q=2;w=1`, 2},
		{"gold-1", `"api-pro-1s";q=20;w=1`, 20},
		{"partner-acme", `"api-partner-1s";q=10;w=1`, 10},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			admitted := 0
			for range 25 {
				w := f.do(req{target: "/api/x", header: map[string]string{"X-API-Key": tt.key}})
				if got := w.Header().Get("RateLimit-Policy"); got != tt.policy {
					t.Fatalf("RateLimit-Policy %q, want %q", got, tt.policy)
				}
				if w.Code == 200 {
					admitted++
				}
			}
			if admitted != tt.admits {
				t.Errorf("admitted %d, want %d", admitted, tt.admits)
			}
		})
	}
}

func TestResponses(t *testing.T) {
	f := setup(t, `
rules:
  - name: login
    match: POST /login
    key: ip
    limits:
      - {algorithm: token_bucket, limit: 1, period: 1s, burst: 2}
      - {algorithm: fixed_window, limit: 20, period: 1h}
`)
	post := func() *httptest.ResponseRecorder { return f.do(req{method: "POST", target: "/login"}) }
	w := post()
	want := map[string]string{
		"RateLimit-Policy":      `"login-1s";q=1;w=1, "login-1h";q=20;w=3600`,
		"RateLimit":             `"login-1s";r=1;t=1, "login-1h";r=19;t=3600`,
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "1",
		"X-RateLimit-Reset":     strconv.FormatInt(storetest.Epoch.Add(time.Second).Unix(), 10),
	}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("allowed: %s = %q, want %q", k, got, v)
		}
	}
	if w.Code != 200 || w.Header().Get("Retry-After") != "" {
		t.Errorf("allowed: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if err := checkRateLimitFields(w.Header()); err != nil {
		t.Errorf("allowed: %v", err)
	}
	post()
	f.clock.Set(300 * time.Millisecond)
	w = post()
	if w.Code != 429 {
		t.Fatalf("third request: %d, want 429", w.Code)
	}
	// The bucket is empty; a token comes back 700ms later: Retry-After 1.
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if got := w.Header().Get("RateLimit"); got != `"login-1s";r=0;t=1, "login-1h";r=18;t=3600` {
		t.Errorf("denied: RateLimit %q", got)
	}
	if err := checkRateLimitFields(w.Header()); err != nil {
		t.Errorf("denied: %v", err)
	}
	var body struct {
		Error struct {
			Code       string `json:"code"`
			Message    string `json:"message"`
			RetryAfter int    `json:"retry_after"`
		} `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Code != "RATE_LIMITED" || body.Error.RetryAfter != 1 || body.Error.Message == "" {
		t.Errorf("429 body %s (%v), want RATE_LIMITED with retry_after 1", w.Body, err)
	}
	// Retry-After is honest: after waiting it, the request is admitted.
	f.clock.Set(300*time.Millisecond + time.Second)
	if w := post(); w.Code != 200 {
		t.Errorf("after waiting Retry-After: %d, want 200", w.Code)
	}
}

func TestHeaderModes(t *testing.T) {
	const yaml = `
rules:
  - {name: r, key: ip, limit: 5, period: 1m}
`
	tests := []struct {
		mode         httplimit.HeaderMode
		ietf, legacy bool
	}{
		{httplimit.HeadersBoth, true, true},
		{httplimit.HeadersIETF, true, false},
		{httplimit.HeadersLegacy, false, true},
		{httplimit.HeadersNone, false, false},
	}
	for _, tt := range tests {
		w := setup(t, yaml, httplimit.WithHeaders(tt.mode)).do(req{target: "/"})
		if got := w.Header().Get("RateLimit") != ""; got != tt.ietf {
			t.Errorf("mode %v: RateLimit present %v, want %v", tt.mode, got, tt.ietf)
		}
		if got := w.Header().Get("X-RateLimit-Limit") != ""; got != tt.legacy {
			t.Errorf("mode %v: X-RateLimit-Limit present %v, want %v", tt.mode, got, tt.legacy)
		}
	}
}

func TestProblemJSON(t *testing.T) {
	f := setup(t, `
rules:
  - {name: r, key: ip, limit: 1, period: 1m}
`, httplimit.WithProblemJSON())
	f.do(req{target: "/"})
	w := f.do(req{target: "/"})
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 429 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %s %q: %v", w.Code, w.Body, w.Header().Get("Content-Type"), err)
	}
	if vp, _ := p["violated-policies"].([]any); len(vp) != 1 || vp[0] != "r-1m" {
		t.Errorf("violated-policies %v, want [r-1m]", p["violated-policies"])
	}
}

func TestShadow(t *testing.T) {
	var logs bytes.Buffer
	clock := storetest.NewClock()
	set := compile(t, `
rules:
  - {name: r, key: ip, limit: 1, period: 1m, shadow: true}
`)
	f := serve(t, clock, policy.New(newLimiter(clock), set, policy.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), policy.WithDenialLog(1)))
	for i := range 5 {
		if w := f.do(req{target: "/"}); w.Code != 200 || w.Header().Get("Retry-After") != "" {
			t.Fatalf("request %d in shadow mode: %d %v; want 200", i, w.Code, w.Header())
		}
	}
	// The rule was decided: the four requests over the limit were logged.
	if n := strings.Count(logs.String(), "shadow rule would deny"); n != 4 {
		t.Errorf("logged %d shadow denials, want 4:\n%s", n, logs.String())
	}
}

// TestUnixSocketPeer: a connection without an address (a Unix socket) is
// limited under one shared key, not rejected.
func TestUnixSocketPeer(t *testing.T) {
	f := setup(t, `
rules:
  - {name: r, key: ip, limit: 1, period: 1m}
`)
	if a, b := f.do(req{target: "/", remote: "@"}), f.do(req{target: "/", remote: "@"}); a.Code != 200 || b.Code != 429 {
		t.Errorf("unix-socket peer: %d then %d, want 200 then 429", a.Code, b.Code)
	}
}

// TestHandBuiltRules: rules built in code get a policy file's defaults
// (cost 0 means 1, not a free look at the state) and checks: a mistake is
// an error of policy.Compile, before the middleware exists, never at a
// request.
func TestHandBuiltRules(t *testing.T) {
	set, err := policy.Compile([]policy.Rule{{Name: "r", Limits: []sluice.Limit{sluice.PerHour(1).Named("r-1h")}}})
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h := httplimit.New(policy.New(sluice.New(memory.New()), set))(next)
	codes := []int{}
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		codes = append(codes, w.Code)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Errorf("hand-built rule with cost 0: %v, want [200 429]", codes)
	}
	two := []sluice.Limit{sluice.PerSecond(2)}
	for _, tt := range []struct {
		name  string
		rules []policy.Rule
		opts  []policy.Option
		want  string // in the error
	}{
		{"no limits", []policy.Rule{{Name: "r"}}, nil, `rule "r": limits has no limits`},
		{"invalid limit", []policy.Rule{{Name: "r", Limits: []sluice.Limit{sluice.PerSecond(0)}}}, nil, "limit must be at least 1"},
		{"cost above capacity", []policy.Rule{{Name: "r", Cost: 5, Limits: two}}, nil, "cost 5 exceeds the capacity 2"},
		{"negative cost", []policy.Rule{{Name: "r", Cost: -1, Limits: two}}, nil, "cost must be at least 1, got -1"},
		{"WithKey for no rule", []policy.Rule{{Name: "r", Limits: two}}, []policy.Option{policy.WithKey("typo", nil)}, `WithKey names rule "typo"`},
		{"rule without a name", []policy.Rule{{Limits: two}}, nil, `rules[0]: name "" is not valid`},
		{"two rules with one name", []policy.Rule{
			{Name: "r", Match: "/a", Limits: two},
			{Name: "r", Match: "/b", Limits: two},
		}, nil, `rule "r": another rule has this name`},
		{"plan without a name", []policy.Rule{{Name: "r", Limits: two,
			Plans: []policy.Plan{{Keys: []string{"k"}, Limits: []sluice.Limit{sluice.PerSecond(4)}}}}}, nil, `plans[0]: name "" is not valid`},
		{"name unfit for a limit", []policy.Rule{{Name: "r r", Limits: two}}, nil, `name "r r" is not valid`},
		{"two defaults in a group", []policy.Rule{{Name: "a", Limits: two}, {Name: "b", Limits: two}}, nil, `neither has rule "a" of the same group`},
		{"conflicting patterns", []policy.Rule{
			{Name: "a", Match: "GET /x/{id}", Limits: two},
			{Name: "b", Match: "/x/y", Limits: two},
		}, nil, `rule "b": match "/x/y"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set, err := policy.Compile(tt.rules, tt.opts...)
			if err == nil {
				t.Fatalf("Compile accepted %+v", tt.rules)
			}
			if set != nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Compile: %v, %q; want no set and an error saying %q", set, err, tt.want)
			}
		})
	}
	// Rules of different groups stack: one default rule each is fine.
	if _, err := policy.Compile([]policy.Rule{{Name: "a", Limits: two}, {Name: "b", Group: "g", Limits: two}}); err != nil {
		t.Errorf("default rules of two groups: %v", err)
	}
}

// TestHandBuiltRulesNamed: limits of rules built in code are named as a
// policy file names them, so that two rules with equal limits on one
// client key count apart, and the headers name each policy; the caller's
// rules are left as they were.
func TestHandBuiltRulesNamed(t *testing.T) {
	rs := []policy.Rule{
		{Name: "a", Match: "/a", Limits: []sluice.Limit{sluice.PerMinute(1)}},
		{Name: "b", Match: "/b", Limits: []sluice.Limit{sluice.PerMinute(1)},
			Plans: []policy.Plan{{Name: "pro", Keys: []string{"192.0.2.9"}, Limits: []sluice.Limit{sluice.PerMinute(2), sluice.PerMinute(3)}}}},
	}
	set, err := policy.Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h := httplimit.New(policy.New(sluice.New(memory.New()), set), httplimit.WithHeaders(httplimit.HeadersIETF))(next)
	do := func(path, remote string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = remote
		h.ServeHTTP(w, r)
		return w
	}
	for _, tt := range []struct {
		path, remote string
		code         int
		policy       string
	}{
		{"/a", "192.0.2.1:1234", 200, `"a-1m";q=1;w=60`},
		{"/b", "192.0.2.1:1234", 200, `"b-1m";q=1;w=60`}, // not /a's count
		{"/a", "192.0.2.1:1234", 429, `"a-1m";q=1;w=60`},
		{"/b", "192.0.2.9:1234", 200, `"b-pro-1m";q=2;w=60, "b-pro-1m-2";q=3;w=60`},
	} {
		w := do(tt.path, tt.remote)
		if got := w.Header().Get("RateLimit-Policy"); w.Code != tt.code || got != tt.policy {
			t.Errorf("%s from %s: %d with RateLimit-Policy %s, want %d with %s", tt.path, tt.remote, w.Code, got, tt.code, tt.policy)
		}
	}
	for _, ls := range [][]sluice.Limit{rs[0].Limits, rs[1].Limits, rs[1].Plans[0].Limits} {
		for _, l := range ls {
			if l.Name != "" {
				t.Errorf("Compile named the caller's limit %s", l)
			}
		}
	}
}

// stackedYAML limits every request per address, requests under /api/ per
// API key too, and logins by the strictest rule besides; audit, in shadow
// mode, watches every request and never shows.
const stackedYAML = `
rules:
  - {name: per-ip, key: ip, algorithm: fixed_window, limit: 100, period: 1m}
  - {name: api, group: keys, match: /api/, key: "header:X-API-Key", algorithm: fixed_window, limit: 3, period: 1h}
  - name: login
    group: login
    match: POST /api/auth/login
    key: ip
    limits:
      - {algorithm: fixed_window, limit: 2, period: 1m}
      - {algorithm: fixed_window, limit: 10, period: 1h}
  - {name: audit, group: audit, key: ip, limit: 1, period: 1h, shadow: true}
`

// TestStacked: a request is decided under the rule of every group that
// matches it, at once. The headers list every limit that applies, each
// under its own name; the binding one (the fewest remaining, or when
// denied the longest wait) drives Retry-After and X-RateLimit-*; the 429
// names the limits that denied; and a denied request spends nothing from
// any rule.
func TestStacked(t *testing.T) {
	f := setup(t, stackedYAML, httplimit.WithProblemJSON())
	reset := func(d time.Duration) string { return strconv.FormatInt(storetest.Epoch.Add(d).Unix(), 10) }
	const (
		ipPol    = `"per-ip-1m";q=100;w=60`
		apiPol   = `"api-1h";q=3;w=3600`
		loginPol = `"login-1m";q=2;w=60, "login-1h";q=10;w=3600`
	)
	for i, tt := range []struct {
		method, target, key string
		code                int
		policy, ratelimit   string
		limit, remaining    string // X-RateLimit-*
		reset               string
		retryAfter          string
		violated            []string
	}{
		{"GET", "/public", "k1", 200, ipPol, `"per-ip-1m";r=99;t=60`,
			"100", "99", reset(time.Minute), "", nil},
		{"GET", "/api/items", "k1", 200, ipPol + ", " + apiPol, `"per-ip-1m";r=98;t=60, "api-1h";r=2;t=3600`,
			"3", "2", reset(time.Hour), "", nil},
		// Ties go to the first limit with the fewest remaining: api.
		{"POST", "/api/auth/login", "k1", 200, ipPol + ", " + apiPol + ", " + loginPol,
			`"per-ip-1m";r=97;t=60, "api-1h";r=1;t=3600, "login-1m";r=1;t=60, "login-1h";r=9;t=3600`,
			"3", "1", reset(time.Hour), "", nil},
		{"POST", "/api/auth/login", "k1", 200, ipPol + ", " + apiPol + ", " + loginPol,
			`"per-ip-1m";r=96;t=60, "api-1h";r=0;t=3600, "login-1m";r=0;t=60, "login-1h";r=8;t=3600`,
			"3", "0", reset(time.Hour), "", nil},
		// api and login-1m deny; api's wait is the longer: it binds.
		{"POST", "/api/auth/login", "k1", 429, ipPol + ", " + apiPol + ", " + loginPol,
			`"per-ip-1m";r=96;t=60, "api-1h";r=0;t=3600, "login-1m";r=0;t=60, "login-1h";r=8;t=3600`,
			"3", "0", reset(time.Hour), "3600", []string{"api-1h", "login-1m"}},
		// Another key from the same address: only login-1m denies, and binds;
		// k2 has spent nothing yet (t=0: nothing to recover).
		{"POST", "/api/auth/login", "k2", 429, ipPol + ", " + apiPol + ", " + loginPol,
			`"per-ip-1m";r=96;t=60, "api-1h";r=3;t=0, "login-1m";r=0;t=60, "login-1h";r=8;t=3600`,
			"2", "0", reset(time.Minute), "60", []string{"login-1m"}},
		// The two denials spent nothing: not the address's count, nor k2's.
		{"GET", "/api/items", "k2", 200, ipPol + ", " + apiPol, `"per-ip-1m";r=95;t=60, "api-1h";r=2;t=3600`,
			"3", "2", reset(time.Hour), "", nil},
	} {
		w := f.do(req{method: tt.method, target: tt.target, header: map[string]string{"X-API-Key": tt.key}})
		for k, v := range map[string]string{
			"RateLimit-Policy":      tt.policy,
			"RateLimit":             tt.ratelimit,
			"X-RateLimit-Limit":     tt.limit,
			"X-RateLimit-Remaining": tt.remaining,
			"X-RateLimit-Reset":     tt.reset,
			"Retry-After":           tt.retryAfter,
		} {
			if got := w.Header().Get(k); got != v {
				t.Errorf("request %d (%s %s, key %s): %s = %q, want %q", i, tt.method, tt.target, tt.key, k, got, v)
			}
		}
		if err := checkRateLimitFields(w.Header()); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		names := policyNames(w)
		if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
			t.Errorf("request %d: RateLimit-Policy names %q are not distinct", i, names)
		}
		if w.Code != tt.code {
			t.Fatalf("request %d (%s %s, key %s): %d %s, want %d", i, tt.method, tt.target, tt.key, w.Code, w.Body, tt.code)
		}
		if tt.code != 429 {
			continue
		}
		var p struct {
			Violated []string `json:"violated-policies"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || !slices.Equal(p.Violated, tt.violated) {
			t.Errorf("request %d: 429 body %s (%v); want violated-policies %q", i, w.Body, err, tt.violated)
		}
	}
}

// TestStackedMissingKey: a request lacking the key of one of its rules is
// refused before any rule is decided, spending nothing from the others.
func TestStackedMissingKey(t *testing.T) {
	f := setup(t, stackedYAML)
	w := f.do(req{method: "POST", target: "/api/auth/login"})
	if w.Code != 401 || !strings.Contains(w.Body.String(), "MISSING_KEY") || w.Header().Get("RateLimit") != "" {
		t.Fatalf("login without an API key: %d %v %s; want 401 MISSING_KEY without rate-limit fields", w.Code, w.Header(), w.Body)
	}
	if got := f.do(req{target: "/public"}).Header().Get("RateLimit"); got != `"per-ip-1m";r=99;t=60` {
		t.Errorf("after the refusal, RateLimit %q; want per-ip untouched (r=99)", got)
	}
	w = f.do(req{method: "POST", target: "/api/auth/login", header: map[string]string{"X-API-Key": "k"}})
	if got := w.Header().Get("RateLimit"); w.Code != 200 || got != `"per-ip-1m";r=98;t=60, "api-1h";r=2;t=3600, "login-1m";r=1;t=60, "login-1h";r=9;t=3600` {
		t.Errorf("login with a key: %d, RateLimit %q; want every rule's first spend", w.Code, got)
	}
}
