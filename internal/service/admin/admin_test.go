package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/service/admin"
	"github.com/sluice-go/sluice/internal/testing/testutil"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// fixture is an engine deciding with a memory store, observed by metrics
// and a Top, and a Handler over them.
type fixture struct {
	engine *policy.Engine
	top    *admin.Top
	h      *admin.Handler
}

func newFixture(t *testing.T, opts ...admin.Option) *fixture {
	t.Helper()
	set, err := policy.Compile([]policy.Rule{
		{Name: "login", Match: "POST /login", Limits: []sluice.Limit{sluice.PerMinute(2).Using(sluice.SlidingWindow)}},
		{Name: "search", Match: "GET /search", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}, Limits: []sluice.Limit{sluice.PerSecond(100).WithBurst(200)}},
		{Name: "probe", Group: "probe", Shadow: true, Limits: []sluice.Limit{sluice.PerHour(1)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	f := &fixture{top: admin.NewTop(0)}
	obs := func(rule, key string, o policy.Outcome) { m.Decision(rule, key, o); f.top.Observe(rule, key, o) }
	f.engine = policy.New(sluice.New(memory.New(), sluice.WithHooks(m.Hooks())), set, policy.WithObserver(obs), policy.WithLogger(slog.New(slog.DiscardHandler)))
	f.h = admin.New(append([]admin.Option{admin.WithEngine(func() *policy.Engine { return f.engine }), admin.WithMetrics(m), admin.WithTop(f.top)}, opts...)...)
	return f
}

// check decides n checks of rule for key.
func (f *fixture) check(t *testing.T, rule, key string, n int) {
	t.Helper()
	for range n {
		if _, err := f.engine.Check(context.Background(), policy.Check{Rule: rule, Key: key}); err != nil {
			t.Fatal(err)
		}
	}
}

// get returns the status, header and body of GET path from h.
func get(t *testing.T, h http.Handler, path string) (int, http.Header, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, rec.Header(), string(b)
}

// newRequest returns a request as httptest.NewRequest does, but to
// localhost, a Host the Handler answers to (httptest's example.com is
// not: see TestHosts).
func newRequest(method, path string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, path, body)
	r.Host = "localhost"
	return r
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	return v
}

// TestStatsAndTop: the stats show the rules, each rule's decisions and
// the most limited keys, masked; top lists the same keys.
func TestStatsAndTop(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.h.Run(ctx)
	stats := func() admin.Stats {
		code, h, body := get(t, f.h, admin.StatsPath)
		if code != 200 || h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-store" {
			t.Fatalf("stats: %d %v %s", code, h, body)
		}
		return decode[admin.Stats](t, body)
	}
	// Two samples, a second apart, before any decision.
	waitFor(t, func() bool { return stats().Series.Steps >= 1 })
	f.check(t, "login", "203.0.113.7", 5)  // 2 allowed, 3 denied
	f.check(t, "login", "198.51.100.1", 1) // allowed
	f.check(t, "probe", "192.0.2.9", 3)    // 1 allowed, 2 shadow-denied
	f.check(t, "search", "key-a", 4)
	f.h.Reloaded(nil)
	f.h.Reloaded(errors.New("sluice.yaml:3: perod: unknown field"))
	var st admin.Stats
	waitFor(t, func() bool {
		st = stats()
		return len(st.Series.Rules) == 3 && st.Series.Rules[2].Window["allowed"] == 4 // search, sorted last
	})
	if len(st.Rules) != 3 || st.Rules[0].Name != "login" || st.Rules[0].Match != "POST /login" || st.Rules[0].Limits[0].Algorithm != "sliding_window" ||
		st.Rules[0].Limits[0].Period != "1m" || st.Rules[1].Key != "header:X-Api-Key" || st.Rules[1].Limits[0].Burst != 200 || !st.Rules[2].Shadow {
		t.Errorf("rules %+v", st.Rules)
	}
	by := map[string]admin.RuleSeries{}
	for _, rs := range st.Series.Rules {
		by[rs.Rule] = rs
	}
	for _, c := range []struct {
		rule, outcome string
		want          float64
	}{{"login", "allowed", 3}, {"login", "denied", 3}, {"probe", "shadow_denied", 2}, {"search", "allowed", 4}} {
		if got := by[c.rule].Window[c.outcome]; got != c.want {
			t.Errorf("%s %s: %v in the window, want %v", c.rule, c.outcome, got, c.want)
		}
	}
	if st.Store.Breaker != "closed" || st.Store.Latency.Calls == 0 || st.Store.Latency.P99 == nil {
		t.Errorf("store %+v, want closed with latency", st.Store)
	}
	if len(st.Reloads) != 2 || st.Reloads[0].Outcome != "rejected" || !strings.Contains(st.Reloads[0].Error, "perod") || st.Reloads[1].Outcome != "ok" {
		t.Errorf("reloads %+v, want the rejection first, then the ok", st.Reloads)
	}
	wantTop := []admin.TopKey{
		{Rule: "login", Key: policy.MaskKey("203.0.113.7"), Denied: 3},
		{Rule: "probe", Key: policy.MaskKey("192.0.2.9"), Denied: 2, Shadow: true},
	}
	if !st.Top.Masked || len(st.Top.Keys) != 2 || st.Top.Keys[0] != wantTop[0] || st.Top.Keys[1] != wantTop[1] || st.Top.Counted != 5 {
		t.Errorf("top %+v, want %+v", st.Top, wantTop)
	}
	code, _, body := get(t, f.h, admin.TopPath+"?n=1")
	top := decode[admin.TopKeys](t, body)
	if code != 200 || len(top.Keys) != 1 || top.Keys[0] != wantTop[0] || top.Counters != admin.DefaultTopK || top.Tracked != 2 || top.SpanSeconds <= 0 {
		t.Errorf("top?n=1: %d %+v", code, top)
	}
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testutil.Until(t, 10*time.Second, "the condition", cond)
}

func TestPlainKeys(t *testing.T) {
	f := newFixture(t, admin.WithPlainKeys(true))
	f.check(t, "login", "203.0.113.7", 3)
	_, _, body := get(t, f.h, admin.TopPath)
	top := decode[admin.TopKeys](t, body)
	if top.Masked || len(top.Keys) != 1 || top.Keys[0].Key != "203.0.113.7" {
		t.Errorf("plain keys: %+v", top)
	}
}

func TestBadRequests(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		path string
		code int
		says string
	}{
		{admin.TopPath + "?n=0", 400, `n=\"0\": want an integer from 1 to 1000`},
		{admin.TopPath + "?n=abc", 400, "n="},
		{admin.TopPath + "?n=1001", 400, "from 1 to 1000"},
		{admin.StatsPath + "?window=601", 400, `window=\"601\": want an integer from 1 to 600`},
		{"/admin/v1/nope", 404, "no endpoint at /admin/v1/nope"},
		{"/index.html", 404, "no endpoint"},
	} {
		code, h, body := get(t, f.h, c.path)
		if code != c.code || !strings.Contains(body, c.says) || h.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %d %s, want %d saying %s", c.path, code, body, c.code, c.says)
		}
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, newRequest("POST", admin.StatsPath, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST stats: %d, want 405", rec.Code)
	}
}

// TestPage: the page and its assets, which are all it loads, under a
// policy that forbids anything else.
func TestPage(t *testing.T) {
	f := newFixture(t)
	code, h, body := get(t, f.h, "/")
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("GET /: %d %v", code, h)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(body, -1)
	if len(refs) < 2 {
		t.Fatalf("the page references %v, want its script and style", refs)
	}
	for _, r := range refs {
		if !strings.HasPrefix(r[1], "/admin/") {
			t.Errorf("the page references %s, outside /admin/", r[1])
			continue
		}
		path, _, _ := strings.Cut(r[1], "?")
		if code, _, asset := get(t, f.h, path); code != 200 || len(asset) == 0 {
			t.Errorf("GET %s: %d, %d bytes", path, code, len(asset))
		}
	}
	_, _, js := get(t, f.h, admin.AssetsPrefix+"app.js")
	if strings.Contains(js, "http://") && !strings.Contains(js, `"http://www.w3.org/2000/svg"`) || strings.Contains(js, "https://") || strings.Contains(js, "innerHTML") {
		t.Error("app.js loads from elsewhere or writes HTML")
	}
}

// TestRegister: on a mux whose "/" is another door (the decision API),
// the dashboard takes GET / exactly and its own paths, and leaves every
// other request to the door.
func TestRegister(t *testing.T) {
	f := newFixture(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "api", http.StatusTeapot) })
	f.h.Register(mux)
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/", 200},
		{"HEAD", "/", 200},
		{"GET", admin.StatsPath, 200},
		{"GET", admin.TopPath, 200},
		{"GET", admin.AssetsPrefix + "style.css", 200},
		{"POST", "/", http.StatusTeapot},
		{"GET", "/v1/check", http.StatusTeapot},
		{"GET", "/healthz", http.StatusTeapot},
		{"GET", "/x", http.StatusTeapot},
		{"GET", "/admin/v1/nope", http.StatusNotFound},
		{"POST", admin.TopPath, http.StatusMethodNotAllowed},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, newRequest(c.method, c.path, nil))
		if rec.Code != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, rec.Code, c.code)
		}
	}
}

// TestReloadsBounded: the last 20 reloads are kept, newest first, and a
// long error is cut.
func TestReloadsBounded(t *testing.T) {
	f := newFixture(t)
	for i := range 25 {
		f.h.Reloaded(errors.New(strings.Repeat("e", 10_000) + string(rune('a'+i))))
	}
	_, _, body := get(t, f.h, admin.StatsPath)
	st := decode[admin.Stats](t, body)
	if len(st.Reloads) != 20 || len(st.Reloads[0].Error) > 5000 || !st.Reloads[0].Time.After(st.Reloads[19].Time) && st.Reloads[0].Time != st.Reloads[19].Time {
		t.Errorf("%d reloads, the first %d bytes, want 20, newest first, cut", len(st.Reloads), len(st.Reloads[0].Error))
	}
}

// TestOperatorRequests: every malformed inspect or reset is a JSON 4xx
// naming what is wrong; a reset is 403 while off, 401 without the right
// bearer token (whose answer never holds the token), and applied only
// with it.
func TestOperatorRequests(t *testing.T) {
	const token = "s3cret-t0ken"
	fx := newFixture(t, admin.WithToken(token))
	on := fx.h
	off := newFixture(t).h
	none := admin.New(admin.WithToken(token)) // no engine: an envoyproxy/ratelimit config
	// An engine and no Top: no key to find a mask among.
	untracked := admin.New(admin.WithToken(token), admin.WithEngine(func() *policy.Engine { return fx.engine }))
	mask := policy.MaskKey("192.0.2.9")
	bearer := "Bearer " + token
	for _, c := range []struct {
		name         string
		h            http.Handler
		method, path string
		auth, body   string
		code         int
		says         string
	}{
		{"inspect without an engine", none, "GET", admin.InspectPath + "?rule=login&key=192.0.2.1", "", "", 501, "envoyproxy/ratelimit"},
		{"reset without an engine", none, "POST", admin.ResetPath, bearer, `{"rule":"login","key":"192.0.2.1"}`, 501, "envoyproxy/ratelimit"},
		{"inspect without a rule", on, "GET", admin.InspectPath + "?key=192.0.2.1", "", "", 400, "rule is required"},
		{"inspect of a bad cost", on, "GET", admin.InspectPath + "?rule=login&key=192.0.2.1&cost=-1", "", "", 400, `cost \"-1\"`},
		{"inspect of a cost too large", on, "GET", admin.InspectPath + "?rule=login&key=192.0.2.1&cost=99999999999999999999", "", "", 400, "cost"},
		{"inspect of an unknown rule", on, "GET", admin.InspectPath + "?rule=nope&key=192.0.2.1", "", "", 400, "nope"},
		{"inspect", on, "GET", admin.InspectPath + "?rule=login&key=192.0.2.1", "", "", 200, `"remaining":1`},
		{"reset while off", off, "POST", admin.ResetPath, bearer, `{"rule":"login","key":"192.0.2.1"}`, 403, admin.TokenEnv},
		{"reset without a token", on, "POST", admin.ResetPath, "", `{"rule":"login","key":"192.0.2.1"}`, 401, "Authorization: Bearer"},
		{"reset with a wrong token", on, "POST", admin.ResetPath, "Bearer " + token + "x", `{"rule":"login","key":"192.0.2.1"}`, 401, "Authorization: Bearer"},
		{"reset with a token of another scheme", on, "POST", admin.ResetPath, "Basic " + token, `{"rule":"login","key":"192.0.2.1"}`, 401, "Authorization: Bearer"},
		{"reset with the token in a longer one", on, "POST", admin.ResetPath, "Bearer " + token + " " + token, `{"rule":"login","key":"192.0.2.1"}`, 401, "Authorization: Bearer"},
		{"reset with the scheme in lower case", on, "POST", admin.ResetPath, "bearer " + token, `{"rule":"login","key":"192.0.2.1"}`, 200, `"limits":1`},
		{"reset of an empty body", on, "POST", admin.ResetPath, bearer, ``, 400, "the request body is empty"},
		{"reset of a bad body", on, "POST", admin.ResetPath, bearer, `{"rule":`, 400, "malformed JSON"},
		{"reset of a lone surrogate", on, "POST", admin.ResetPath, bearer, `{"rule":"login","key":"a\ud800"}`, 400, "surrogate"},
		{"reset of an unknown field", on, "POST", admin.ResetPath, bearer, `{"rule":"login","kye":"k"}`, 400, "kye"},
		{"reset of two objects", on, "POST", admin.ResetPath, bearer, `{"rule":"login","key":"192.0.2.1"} {"rule":"search","key":"192.0.2.1"}`, 400, "after the JSON object"},
		{"reset of a body too large", on, "POST", admin.ResetPath, bearer, `{"rule":"login","key":"` + strings.Repeat("k", 100<<10) + `"}`, 413, "bytes"},
		{"reset of a key not UTF-8", on, "POST", admin.ResetPath, bearer, "{\"rule\":\"login\",\"key\":\"192.0.2.1\xff\"}", 400, "UTF-8"},
		{"reset without a rule", on, "POST", admin.ResetPath, bearer, `{"key":"192.0.2.1"}`, 400, "rule is required"},
		{"reset of an unknown rule", on, "POST", admin.ResetPath, bearer, `{"rule":"nope","key":"192.0.2.1"}`, 400, "nope"},
		{"reset", on, "POST", admin.ResetPath, bearer, `{"rule":"login","key":"192.0.2.1"}`, 200, `"limits":1`},
		{"inspect of a mask no key has", on, "GET", admin.InspectPath + "?rule=login&key=" + url.QueryEscape(mask), "", "", 400,
			`unknown masked key: none of the 0 keys this server's top tracks (the most limited of the last 5m to 10m) masks to \"` + mask + `\"; give the key in the clear, or ask the server whose top showed it`},
		{"reset of a mask no key has", on, "POST", admin.ResetPath, bearer, `{"rule":"login","key":"` + mask + `"}`, 400, "unknown masked key"},
		{"inspect of a mask without a top", untracked, "GET", admin.InspectPath + "?rule=login&key=" + url.QueryEscape(mask), "", "", 400,
			`unknown masked key: \"` + mask + `\" has the form of a masked key, and this server keeps no top keys to find it among; give the key in the clear`},
		{"inspect of a mask of an unknown rule", on, "GET", admin.InspectPath + "?rule=nope&key=" + url.QueryEscape(mask), "", "", 400, `unknown rule \"nope\"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := newRequest(c.method, c.path, strings.NewReader(c.body))
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			rec := httptest.NewRecorder()
			c.h.ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != c.code || !strings.Contains(body, c.says) || rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("%s %s: %d %s, want %d saying %s", c.method, c.path, rec.Code, body, c.code, c.says)
			}
			if strings.Contains(body, token) {
				t.Errorf("the answer holds the token: %s", body)
			}
			if c.code == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("a 401 without WWW-Authenticate")
			}
		})
	}
}

// TestReloadErrorCutAtRune: a long reload error is cut between two
// characters, never inside one (which JSON would show as U+FFFD).
func TestReloadErrorCutAtRune(t *testing.T) {
	f := newFixture(t)
	f.h.Reloaded(errors.New("x" + strings.Repeat("é", 5000)))
	_, _, body := get(t, f.h, admin.StatsPath)
	st := decode[admin.Stats](t, body)
	if e := st.Reloads[0].Error; strings.ContainsRune(e, utf8.RuneError) || !strings.HasSuffix(e, "é…") || len(e) > 4<<10+len("…") {
		t.Errorf("the error cut to %d bytes ends %q", len(e), e[max(0, len(e)-8):])
	}
}

// TestStatsEmpty: before any sample (or without metrics) every list of
// the stats is an empty JSON array, not null, and the percentiles null.
func TestStatsEmpty(t *testing.T) {
	for name, h := range map[string]*admin.Handler{"no metrics": admin.New(), "no sample yet": newFixture(t).h} {
		_, _, body := get(t, h, admin.StatsPath)
		for _, want := range []string{`"rules":[]`, `"store_errors":[]`, `"degraded":[]`, `"takes":[]`, `"keys":[]`, `"reloads":[]`, `"p99_seconds":null`} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: stats %s lack %s", name, body, want)
			}
		}
	}
}
