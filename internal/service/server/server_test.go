package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/testing/testutil"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

const rulesYAML = `
rules:
  - {name: search, match: GET /search, key: "header:X-API-Key", algorithm: fixed_window, limit: 2, period: 1m}
  - {name: export, match: GET /export, key: "header:X-API-Key", algorithm: fixed_window, limit: 1, period: 1h}
  - {name: shadowed, match: GET /shadow, key: "header:X-API-Key", algorithm: fixed_window, limit: 1, period: 1m, shadow: true}
  - {name: heavy, match: GET /heavy, key: "header:X-API-Key", limit: 10, period: 1s, cost: 3}
`

// epoch is storetest.Epoch in Unix seconds.
var epoch = storetest.Epoch.Unix()

type fixture struct {
	t       *testing.T
	clock   *storetest.Clock
	elapsed time.Duration
	engine  *policy.Engine
	srv     *Server
	logs    *testutil.Buffer
}

func parse(t testing.TB, yaml string) *config.File {
	t.Helper()
	f, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// compile returns the rules of a policy file, compiled.
func compile(t testing.TB, yaml string) *policy.RuleSet {
	t.Helper()
	set, err := parse(t, yaml).Compile()
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func setup(t *testing.T, yaml string, opts ...Option) *fixture {
	c := storetest.NewClock()
	lim := sluice.New(memory.New(memory.WithClock(c.Now)), sluice.WithClock(c.Now))
	return setupWith(t, lim, c, yaml, opts...)
}

func setupWith(t *testing.T, lim *sluice.Limiter, c *storetest.Clock, yaml string, opts ...Option) *fixture {
	f := &fixture{t: t, clock: c, logs: &testutil.Buffer{}}
	f.engine = policy.New(lim, compile(t, yaml), policy.WithLogger(slog.New(slog.NewTextHandler(f.logs, nil))), policy.WithDenialLog(1))
	f.srv = New(f.engine, append([]Option{WithClock(c.Now)}, opts...)...)
	return f
}

// advance moves the fake clock forward by d.
func (f *fixture) advance(d time.Duration) {
	f.elapsed += d
	f.clock.Set(f.elapsed)
}

func (f *fixture) do(method, path, contentType, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	return w
}

func (f *fixture) post(path, body string) *httptest.ResponseRecorder {
	return f.do(http.MethodPost, path, "application/json", body)
}

func (f *fixture) check(rule, key string, cost int) *httptest.ResponseRecorder {
	return f.post("/v1/check", fmt.Sprintf(`{"rule":%q,"key":%q,"cost":%d}`, rule, key, cost))
}

func body(w *httptest.ResponseRecorder) string { return strings.TrimSuffix(w.Body.String(), "\n") }

func errBody(code, msg string) string {
	return fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`, code, msg)
}

// remaining returns the remaining of a cost-0 check.
func (f *fixture) remaining(rule, key string) string {
	w := f.check(rule, key, 0)
	if w.Code != 200 {
		f.t.Fatalf("cost-0 check of %s/%s: %d %s", rule, key, w.Code, w.Body)
	}
	return w.Header().Get("X-RateLimit-Remaining")
}

func TestCheck(t *testing.T) {
	f := setup(t, rulesYAML)
	pol := `"search-1m";q=2;w=60`
	reset := strconv.FormatInt(epoch+60, 10)
	for i, tt := range []struct {
		code    int
		body    string
		headers map[string]string
	}{
		{200,
			`{"allowed":true,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":0,"policies":[{"name":"search-1m","allowed":true,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":0}]}`,
			map[string]string{"RateLimit-Policy": pol, "RateLimit": `"search-1m";r=1;t=60`, "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": reset, "Retry-After": "", "Content-Type": "application/json", "Cache-Control": "no-store"}},
		{200,
			`{"allowed":true,"limit":2,"remaining":0,"reset_after_ms":60000,"retry_after_ms":0,"policies":[{"name":"search-1m","allowed":true,"limit":2,"remaining":0,"reset_after_ms":60000,"retry_after_ms":0}]}`,
			map[string]string{"RateLimit": `"search-1m";r=0;t=60`, "X-RateLimit-Remaining": "0", "Retry-After": ""}},
		{429,
			`{"allowed":false,"limit":2,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"policies":[{"name":"search-1m","allowed":false,"limit":2,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000}]}`,
			map[string]string{"RateLimit-Policy": pol, "RateLimit": `"search-1m";r=0;t=60`, "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset, "Retry-After": "60", "Content-Type": "application/json", "Cache-Control": "no-store"}},
	} {
		w := f.post("/v1/check", `{"rule":"search","key":"abc"}`) // cost: the rule's, 1
		if w.Code != tt.code || body(w) != tt.body {
			t.Errorf("request %d: %d %s\nwant %d %s", i, w.Code, body(w), tt.code, tt.body)
		}
		for k, v := range tt.headers {
			if got := w.Header().Get(k); got != v {
				t.Errorf("request %d: %s = %q, want %q", i, k, got, v)
			}
		}
	}
	// Another key has its own quota.
	if w := f.check("search", "other", 1); w.Code != 200 {
		t.Errorf("other key: %d %s", w.Code, w.Body)
	}
	// The rule's cost is the default: heavy costs 3 of 10.
	if w := f.post("/v1/check", `{"rule":"heavy","key":"abc"}`); w.Header().Get("X-RateLimit-Remaining") != "7" {
		t.Errorf("heavy: %d %v %s; want remaining 7", w.Code, w.Header(), w.Body)
	}
}

// TestRetryAfterHonest: waiting retry_after_ms (or Retry-After seconds)
// admits the same check, and a millisecond less does not.
func TestRetryAfterHonest(t *testing.T) {
	for _, tt := range []struct {
		rule string
		cost int
		n    int // admitted before the denial
	}{
		{"search", 1, 2},
		{"heavy", 3, 3}, // token bucket 10/1s: 9 spent, 1 left, needs 2 more tokens
		{"export", 1, 1},
	} {
		for _, unit := range []string{"ms", "s"} {
			f := setup(t, rulesYAML)
			f.advance(10*time.Second + 500*time.Millisecond) // mid-window
			for range tt.n {
				if w := f.check(tt.rule, "k", tt.cost); w.Code != 200 {
					t.Fatalf("%s: %d %s", tt.rule, w.Code, w.Body)
				}
			}
			w := f.check(tt.rule, "k", tt.cost)
			if w.Code != 429 {
				t.Fatalf("%s: %d %s, want 429", tt.rule, w.Code, w.Body)
			}
			var wait time.Duration
			if unit == "ms" {
				var ms int64
				i := strings.Index(w.Body.String(), `"retry_after_ms":`)
				fmt.Sscanf(w.Body.String()[i+len(`"retry_after_ms":`):], "%d", &ms)
				wait = time.Duration(ms) * time.Millisecond
				at := f.elapsed
				f.advance(wait - time.Millisecond)
				if w := f.check(tt.rule, "k", tt.cost); w.Code != 429 {
					t.Errorf("%s: admitted 1ms before retry_after_ms %d: %d %s", tt.rule, ms, w.Code, w.Body)
				}
				f.elapsed = at
			} else {
				secs, err := strconv.Atoi(w.Header().Get("Retry-After"))
				if err != nil || secs < 1 {
					t.Fatalf("%s: Retry-After %q", tt.rule, w.Header().Get("Retry-After"))
				}
				wait = time.Duration(secs) * time.Second
			}
			f.advance(wait)
			if w := f.check(tt.rule, "k", tt.cost); w.Code != 200 {
				t.Errorf("%s: after waiting %s (%s): %d %s, want 200", tt.rule, wait, unit, w.Code, w.Body)
			}
		}
	}
}

func TestBadRequests(t *testing.T) {
	f := setup(t, rulesYAML)
	const known = "known rules: export, heavy, search, shadowed"
	huge := `{"rule":"search","key":"` + strings.Repeat("a", MaxBodyBytes) + `"}`
	for _, tt := range []struct {
		name, method, path, ctype, body string
		code                            int
		want                            string
		allow                           string
	}{
		{"malformed", "POST", "/v1/check", "application/json", `{"rule":"search",}`, 400,
			errBody("BAD_REQUEST", "malformed JSON at byte offset 17: invalid character '}' looking for beginning of object key string"), ""},
		{"truncated", "POST", "/v1/check", "application/json", `{"rule":"search"`, 400,
			errBody("BAD_REQUEST", "malformed JSON: the body ends at byte offset 16, inside the JSON value"), ""},
		{"empty", "POST", "/v1/check", "application/json", " \n", 400,
			errBody("BAD_REQUEST", "the request body is empty; send a JSON object"), ""},
		{"not an object", "POST", "/v1/check", "application/json", `[1]`, 400,
			errBody("BAD_REQUEST", "the body must be a JSON object, got array"), ""},
		{"unknown field", "POST", "/v1/check", "application/json", `{"rule":"search","key":"a","cots":1}`, 400,
			errBody("BAD_REQUEST", `unknown field "cots"; accepted fields: "rule", "key", "cost", "class"`), ""},
		{"missing rule", "POST", "/v1/check", "application/json", `{"key":"a"}`, 400,
			errBody("BAD_REQUEST", `"rule" is required`), ""},
		{"missing key", "POST", "/v1/check", "application/json", `{"rule":"search"}`, 400,
			errBody("BAD_REQUEST", `invalid client key: rule "search" is keyed by header:X-Api-Key and needs a key`), ""},
		{"empty key", "POST", "/v1/check", "application/json", `{"rule":"search","key":""}`, 400,
			errBody("BAD_REQUEST", `invalid client key: rule "search" is keyed by header:X-Api-Key and needs a key`), ""},
		{"unknown rule", "POST", "/v1/check", "application/json", `{"rule":"serch","key":"a"}`, 400,
			errBody("BAD_REQUEST", `unknown rule "serch"; `+known), ""},
		{"negative cost", "POST", "/v1/check", "application/json", `{"rule":"search","key":"a","cost":-1}`, 400,
			errBody("BAD_REQUEST", `"cost" must not be negative, got -1`), ""},
		{"cost above capacity", "POST", "/v1/check", "application/json", `{"rule":"search","key":"a","cost":3}`, 400,
			errBody("BAD_REQUEST", `rule "search": invalid cost: cost 3 exceeds the capacity 2 of search-1m: fixed_window 2/1m0s; it could never be admitted`), ""},
		{"cost too big for an int", "POST", "/v1/check", "application/json", `{"rule":"search","key":"a","cost":1e30}`, 400,
			errBody("BAD_REQUEST", `field "cost" must be an integer, got number 1e30`), ""},
		{"fractional cost", "POST", "/v1/check", "application/json", `{"rule":"search","key":"a","cost":1.5}`, 400,
			errBody("BAD_REQUEST", `field "cost" must be an integer, got number 1.5`), ""},
		{"string cost", "POST", "/v1/check", "application/json", `{"rule":"search","key":"a","cost":"1"}`, 400,
			errBody("BAD_REQUEST", `field "cost" must be an integer, got string`), ""},
		{"trailing data", "POST", "/v1/check", "application/json", `{"rule":"search","key":"a"} {}`, 400,
			errBody("BAD_REQUEST", "unexpected data after the JSON object at byte offset 28; send one object"), ""},
		{"too large", "POST", "/v1/check", "application/json", huge, 413,
			errBody("TOO_LARGE", "the request body exceeds 65536 bytes"), ""},
		{"GET check", "GET", "/v1/check", "", "", 405,
			errBody("METHOD_NOT_ALLOWED", "method GET is not allowed on /v1/check; use POST"), "POST"},
		{"PUT batch", "PUT", "/v1/check/batch", "application/json", "{}", 405,
			errBody("METHOD_NOT_ALLOWED", "method PUT is not allowed on /v1/check/batch; use POST"), "POST"},
		{"POST healthz", "POST", "/healthz", "", "", 405,
			errBody("METHOD_NOT_ALLOWED", "method POST is not allowed on /healthz; use GET, HEAD"), "GET, HEAD"},
		{"text/plain", "POST", "/v1/check", "text/plain", `{"rule":"search","key":"a"}`, 415,
			errBody("UNSUPPORTED_MEDIA_TYPE", `Content-Type "text/plain" is not supported; send application/json`), ""},
		{"form", "POST", "/v1/check/batch", "application/x-www-form-urlencoded", `a=b`, 415,
			errBody("UNSUPPORTED_MEDIA_TYPE", `Content-Type "application/x-www-form-urlencoded" is not supported; send application/json`), ""},
		{"no such path", "GET", "/v2/check", "", "", 404,
			errBody("NOT_FOUND", "no endpoint at /v2/check; the API serves POST /v1/check, POST /v1/check/batch, POST /v1/settle, POST /v1/settle/batch, POST /v1/renew, POST /v1/release, GET /healthz and GET /readyz"), ""},
		{"batch: no checks", "POST", "/v1/check/batch", "application/json", `{"checks":[]}`, 400,
			errBody("BAD_REQUEST", `"checks" must hold 1 to 100 checks, got 0`), ""},
		{"batch: missing checks", "POST", "/v1/check/batch", "application/json", `{}`, 400,
			errBody("BAD_REQUEST", `"checks" must hold 1 to 100 checks, got 0`), ""},
		{"batch: too many", "POST", "/v1/check/batch", "application/json", `{"checks":[` + strings.Repeat(`{"rule":"search","key":"a"},`, 100) + `{"rule":"search","key":"a"}]}`, 400,
			errBody("BAD_REQUEST", `"checks" must hold 1 to 100 checks, got 101`), ""},
		{"batch: unknown rule", "POST", "/v1/check/batch", "application/json", `{"checks":[{"rule":"search","key":"a"},{"rule":"nope","key":"a"}]}`, 400,
			errBody("BAD_REQUEST", `checks[1]: unknown rule "nope"; `+known), ""},
		{"batch: negative cost", "POST", "/v1/check/batch", "application/json", `{"checks":[{"rule":"search","key":"a","cost":-2}]}`, 400,
			errBody("BAD_REQUEST", `checks[0]: "cost" must not be negative, got -2`), ""},
		{"batch: duplicate", "POST", "/v1/check/batch", "application/json", `{"checks":[{"rule":"search","key":"a"},{"rule":"export","key":"a"},{"rule":"search","key":"a"}]}`, 400,
			errBody("BAD_REQUEST", `checks[2]: duplicate check: repeats checks[0] (rule "search", key "a"); list each rule once per key`), ""},
		{"batch: one unknown rule", "POST", "/v1/check/batch", "application/json", `{"checks":[{"rule":"nope","key":"a"}]}`, 400,
			errBody("BAD_REQUEST", `checks[0]: unknown rule "nope"; `+known), ""},
		{"batch: cost above capacity", "POST", "/v1/check/batch", "application/json", `{"checks":[{"rule":"search","key":"a"},{"rule":"export","key":"a","cost":2}]}`, 400,
			errBody("BAD_REQUEST", `checks[1]: rule "export": invalid cost: cost 2 exceeds the capacity 1 of export-1h: fixed_window 1/1h0m0s; it could never be admitted`), ""},
		{"batch: unknown field", "POST", "/v1/check/batch", "application/json", `{"checks":[{"rule":"search","key":"a","n":1}]}`, 400,
			errBody("BAD_REQUEST", `unknown field "n"; accepted fields: "checks", and in each check "rule", "key", "cost", "class"`), ""},
		// encoding/json would make both "a\ufffdb": one count for two keys.
		{"key not UTF-8", "POST", "/v1/check", "application/json", "{\"rule\":\"search\",\"key\":\"a\xffb\"}", 400,
			errBody("BAD_REQUEST", `field "key" is not valid UTF-8 (byte offset 25); JSON text must be UTF-8`), ""},
		{"rule not UTF-8", "POST", "/v1/check", "application/json", "{\"rule\":\"se\xe2\x82arch\",\"key\":\"a\"}", 400,
			errBody("BAD_REQUEST", `field "rule" is not valid UTF-8 (byte offset 11); JSON text must be UTF-8`), ""},
		// And so would it a lone surrogate escape; a whole pair, an escaped
		// backslash before "ud800", and a plain \u escape are keys.
		{"lone high surrogate", "POST", "/v1/check", "application/json", `{"rule":"search","key":"a\ud800b"}`, 400,
			errBody("BAD_REQUEST", `field "key" holds half a UTF-16 surrogate pair (an escape from \ud800 to \udfff without its other half) (byte offset 25); escape a character beyond U+FFFF as a whole pair, such as \ud83d\ude00, or send it as UTF-8`), ""},
		{"lone low surrogate in a batch", "POST", "/v1/check/batch", "application/json", `{"checks":[{"rule":"search","key":"x"},{"rule":"search","key":"\udfff"}]}`, 400,
			errBody("BAD_REQUEST", `field "checks[1].key" holds half a UTF-16 surrogate pair (an escape from \ud800 to \udfff without its other half) (byte offset 63); escape a character beyond U+FFFF as a whole pair, such as \ud83d\ude00, or send it as UTF-8`), ""},
		{"field name not UTF-8", "POST", "/v1/check", "application/json", "{\"rule\":\"search\",\"k\xffey\":\"a\"}", 400,
			errBody("BAD_REQUEST", `a field name is not valid UTF-8 (byte offset 19); JSON text must be UTF-8`), ""},
		{"not UTF-8 outside a string", "POST", "/v1/check", "application/json", "{\"rule\":\"search\",\"key\":5\xff}", 400,
			errBody("BAD_REQUEST", `the body is not valid UTF-8 (byte offset 24); JSON text must be UTF-8`), ""},
		{"batch: key not UTF-8", "POST", "/v1/check/batch", "application/json", "{\"checks\":[{\"rule\":\"search\",\"key\":\"a\"},{\"rule\":\"search\",\"key\":\"\xc3\"}]}", 400,
			errBody("BAD_REQUEST", `field "checks[1].key" is not valid UTF-8 (byte offset 63); JSON text must be UTF-8`), ""},
		{"batch: checks not an array", "POST", "/v1/check/batch", "application/json", `{"checks":{}}`, 400,
			errBody("BAD_REQUEST", `field "checks" must be an array, got object`), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := f.do(tt.method, tt.path, tt.ctype, tt.body)
			if w.Code != tt.code || body(w) != tt.want {
				t.Errorf("%d %s\nwant %d %s", w.Code, body(w), tt.code, tt.want)
			}
			if got := w.Header().Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control = %q, want no-store, as on decisions", cc)
			}
		})
	}
	// Nothing above consumed anything.
	if got := f.remaining("search", "a"); got != "2" {
		t.Errorf("after the bad requests, search/a remaining %s, want 2", got)
	}
	// U+FFFD itself, escaped or not, is a key of its own: valid UTF-8.
	for _, b := range []string{`{"rule":"search","key":"\ufffd"}`, "{\"rule\":\"search\",\"key\":\"\uFFFD\"}"} {
		if w := f.post("/v1/check", b); w.Code != 200 {
			t.Errorf("%s: %d %s", b, w.Code, w.Body)
		}
	}
	if got := f.remaining("search", "\ufffd"); got != "0" {
		t.Errorf("after two checks of the key U+FFFD, remaining %s, want 0", got)
	}
	// application/json with parameters, and no Content-Type at all, are accepted.
	for _, ct := range []string{"application/json; charset=utf-8", ""} {
		if w := f.do("POST", "/v1/check", ct, `{"rule":"search","key":"ct"}`); w.Code != 200 {
			t.Errorf("Content-Type %q: %d %s", ct, w.Code, w.Body)
		}
	}
}

// TestManyRules: an unknown rule among more than 20 names none.
func TestManyRules(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 21 {
		fmt.Fprintf(&b, "  - {name: r%02d, match: /r%02d, limit: 1, period: 1s}\n", i, i)
	}
	f := setup(t, b.String())
	w := f.check("nope", "a", 1)
	if want := errBody("BAD_REQUEST", `unknown rule "nope" (21 rules are configured)`); w.Code != 400 || body(w) != want {
		t.Errorf("%d %s\nwant 400 %s", w.Code, body(w), want)
	}
}

func TestShadow(t *testing.T) {
	f := setup(t, rulesYAML)
	f.check("shadowed", "a", 1)
	w := f.check("shadowed", "a", 1)
	want := `{"allowed":true,"limit":1,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"shadow_denied":true,"policies":[{"name":"shadowed-1m","allowed":false,"limit":1,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000}]}`
	if w.Code != 200 || body(w) != want {
		t.Errorf("%d %s\nwant 200 %s", w.Code, body(w), want)
	}
	if w.Header().Get("Retry-After") != "" || w.Header().Get("RateLimit") != `"shadowed-1m";r=0;t=60` {
		t.Errorf("headers %v: want the real state and no Retry-After", w.Header())
	}
	if !strings.Contains(f.logs.String(), "shadow rule would deny") {
		t.Errorf("the shadow denial was not logged: %s", f.logs)
	}
}

func TestBatch(t *testing.T) {
	f := setup(t, rulesYAML)
	const both = `{"checks":[{"rule":"search","key":"a"},{"rule":"export","key":"a"}]}`
	w := f.post("/v1/check/batch", both)
	want := `{"results":[` +
		`{"allowed":true,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":0,"policies":[{"name":"search-1m","allowed":true,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":0}]},` +
		`{"allowed":true,"limit":1,"remaining":0,"reset_after_ms":3600000,"retry_after_ms":0,"policies":[{"name":"export-1h","allowed":true,"limit":1,"remaining":0,"reset_after_ms":3600000,"retry_after_ms":0}]}` +
		`],"allowed":true}`
	if w.Code != 200 || body(w) != want {
		t.Errorf("first batch: %d %s\nwant 200 %s", w.Code, body(w), want)
	}
	if w.Header().Get("RateLimit") != "" || w.Header().Get("X-RateLimit-Remaining") != "" {
		t.Errorf("batch carries rate-limit headers: %v", w.Header())
	}
	// export now denies: the whole batch is denied, and search consumes
	// nothing. The status is still 200.
	w = f.post("/v1/check/batch", both)
	want = `{"results":[` +
		`{"allowed":false,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":3600000,"policies":[{"name":"search-1m","allowed":true,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":0}]},` +
		`{"allowed":false,"limit":1,"remaining":0,"reset_after_ms":3600000,"retry_after_ms":3600000,"policies":[{"name":"export-1h","allowed":false,"limit":1,"remaining":0,"reset_after_ms":3600000,"retry_after_ms":3600000}]}` +
		`],"allowed":false}`
	if w.Code != 200 || body(w) != want {
		t.Errorf("denied batch: %d %s\nwant 200 %s", w.Code, body(w), want)
	}
	if got := f.remaining("search", "a"); got != "1" {
		t.Errorf("after the denied batch, search/a remaining %s, want 1 (unchanged)", got)
	}

	// The batch is one decision, whatever its keys and costs: export/a
	// denies, so export/b and search/b spend nothing either.
	w = f.post("/v1/check/batch", `{"checks":[{"rule":"export","key":"a"},{"rule":"export","key":"b"},{"rule":"search","key":"b","cost":2}]}`)
	want = `{"results":[` +
		`{"allowed":false,"limit":1,"remaining":0,"reset_after_ms":3600000,"retry_after_ms":3600000,"policies":[{"name":"export-1h","allowed":false,"limit":1,"remaining":0,"reset_after_ms":3600000,"retry_after_ms":3600000}]},` +
		`{"allowed":false,"limit":1,"remaining":1,"reset_after_ms":0,"retry_after_ms":3600000,"policies":[{"name":"export-1h","allowed":true,"limit":1,"remaining":1,"reset_after_ms":0,"retry_after_ms":0}]},` +
		`{"allowed":false,"limit":2,"remaining":2,"reset_after_ms":0,"retry_after_ms":3600000,"policies":[{"name":"search-1m","allowed":true,"limit":2,"remaining":2,"reset_after_ms":0,"retry_after_ms":0}]}` +
		`],"allowed":false}`
	if w.Code != 200 || body(w) != want {
		t.Errorf("denied batch of several keys and costs: %d %s\nwant 200 %s", w.Code, body(w), want)
	}
	for _, c := range []struct{ rule, key, want string }{{"export", "b", "1"}, {"search", "b", "2"}, {"search", "a", "1"}} {
		if got := f.remaining(c.rule, c.key); got != c.want {
			t.Errorf("after the denied batch, %s/%s remaining %s, want %s (unchanged)", c.rule, c.key, got, c.want)
		}
	}

	// Admitted, every check spends its own cost.
	w = f.post("/v1/check/batch", `{"checks":[{"rule":"export","key":"b"},{"rule":"search","key":"b","cost":2}]}`)
	if w.Code != 200 || !strings.HasSuffix(body(w), `"allowed":true}`) {
		t.Errorf("admitted batch: %d %s", w.Code, body(w))
	}
	if e, s := f.remaining("export", "b"), f.remaining("search", "b"); e != "0" || s != "0" {
		t.Errorf("after the admitted batch, export/b remaining %s and search/b %s, want 0 and 0", e, s)
	}

	// A cost-0 check asks for nothing: on an exhausted fixed window it is
	// admitted, and so is its batch.
	w = f.post("/v1/check/batch", `{"checks":[{"rule":"search","key":"a","cost":1},{"rule":"export","key":"a","cost":0}]}`)
	if w.Code != 200 || !strings.HasPrefix(body(w), `{"results":[{"allowed":true,"limit":2,"remaining":0,`) || !strings.HasSuffix(body(w), `"allowed":true}`) {
		t.Errorf("cost 0 on an exhausted limit: %d %s; want allowed, search spending its 1", w.Code, body(w))
	}
}

// TestBatchShadow: a check of a rule in shadow mode never makes its batch
// fail; it is decided, on its own, only when the batch is admitted.
func TestBatchShadow(t *testing.T) {
	f := setup(t, rulesYAML)
	f.check("shadowed", "c", 1) // exhaust
	w := f.post("/v1/check/batch", `{"checks":[{"rule":"shadowed","key":"c"},{"rule":"search","key":"c"}]}`)
	want := `{"results":[` +
		`{"allowed":true,"limit":1,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"shadow_denied":true,"policies":[{"name":"shadowed-1m","allowed":false,"limit":1,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000}]},` +
		`{"allowed":true,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":0,"policies":[{"name":"search-1m","allowed":true,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":0}]}` +
		`],"allowed":true}`
	if w.Code != 200 || body(w) != want {
		t.Errorf("shadow denial in an admitted batch: %d %s\nwant 200 %s", w.Code, body(w), want)
	}
	if got := f.remaining("search", "c"); got != "1" {
		t.Errorf("search/c remaining %s, want 1", got)
	}

	// A denied batch goes no further: its shadow check is not decided, and
	// spends nothing.
	f.check("export", "d", 1) // exhaust
	w = f.post("/v1/check/batch", `{"checks":[{"rule":"shadowed","key":"d"},{"rule":"export","key":"d"}]}`)
	want = `{"results":[` +
		`{"allowed":false,"retry_after_ms":0,"policies":[]},` +
		`{"allowed":false,"limit":1,"remaining":0,"reset_after_ms":3600000,"retry_after_ms":3600000,"policies":[{"name":"export-1h","allowed":false,"limit":1,"remaining":0,"reset_after_ms":3600000,"retry_after_ms":3600000}]}` +
		`],"allowed":false}`
	if w.Code != 200 || body(w) != want {
		t.Errorf("shadow check in a denied batch: %d %s\nwant 200 %s", w.Code, body(w), want)
	}
	if got := f.remaining("shadowed", "d"); got != "1" {
		t.Errorf("shadowed/d remaining %s, want 1: the denied batch spent nothing", got)
	}
}

// ipYAML has rules of the other key sources: ip, global and request.
const ipYAML = `
rules:
  - {name: login, match: POST /login, key: ip, algorithm: fixed_window, limit: 2, period: 1m}
  - {name: total, group: total, key: global, algorithm: fixed_window, limit: 100, period: 1m}
  - {name: teams, key: request, algorithm: fixed_window, limit: 2, period: 1m}
`

// TestCheckKeySources: the key of a check is the client key as the rule's
// key source yields it. An ip rule needs an IP address, one form per
// client (an IPv6 client by its /64), and its error says how to key by
// what callers name; a global rule ignores the key; a request rule takes
// any key but an empty one, each its own count.
func TestCheckKeySources(t *testing.T) {
	f := setup(t, ipYAML)
	for _, tt := range []struct {
		name, rule, key string
		code            int
		remaining       string // X-RateLimit-Remaining, when 200
		err             string // the message, when 400
	}{
		{"not an address", "login", "team-a", 400, "", `invalid client key: rule "login" is keyed by ip, and "team-a" is not an IP address; write key: request for keys your callers name`},
		{"empty", "login", "", 400, "", `invalid client key: rule "login" is keyed by ip and needs a key`},
		{"with a port", "login", "192.0.2.1:80", 400, "", `invalid client key: rule "login" is keyed by ip, and "192.0.2.1:80" is not an IP address; write key: request for keys your callers name`},
		{"IPv4", "login", "192.0.2.1", 200, "1", ""},
		{"IPv4-mapped: the same client", "login", "::ffff:192.0.2.1", 200, "0", ""},
		{"IPv6", "login", "2001:db8:1:2::1", 200, "1", ""},
		{"the same /64", "login", "2001:db8:1:2:ffff::9", 200, "0", ""},
		{"the /64 itself", "login", "2001:db8:1:2::/64", 429, "", ""},
		{"another /64", "login", "2001:db8:1:3::1", 200, "1", ""},
		{"global: any key", "total", "abc", 200, "99", ""},
		{"global: no key, the same count", "total", "", 200, "98", ""},
		{"request: any key", "teams", "team-a", 200, "1", ""},
		{"request: the same key", "teams", "team-a", 200, "0", ""},
		{"request: another key", "teams", "team-b", 200, "1", ""},
		{"request: an address is a key like any", "teams", "192.0.2.1", 200, "1", ""},
		{"request: no key", "teams", "", 400, "", `invalid client key: rule "teams" is keyed by request and needs a key`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := f.check(tt.rule, tt.key, 1)
			if w.Code != tt.code {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tt.code)
			}
			switch tt.code {
			case 200:
				if got := w.Header().Get("X-RateLimit-Remaining"); got != tt.remaining {
					t.Errorf("remaining %s, want %s", got, tt.remaining)
				}
			case 400:
				if want := errBody("BAD_REQUEST", tt.err); body(w) != want {
					t.Errorf("%s\nwant %s", body(w), want)
				}
			}
		})
	}
	// In a batch, the bad check is named, and nothing is spent.
	w := f.post("/v1/check/batch", `{"checks":[{"rule":"total","key":""},{"rule":"login","key":"me"}]}`)
	if want := errBody("BAD_REQUEST", `checks[1]: invalid client key: rule "login" is keyed by ip, and "me" is not an IP address; write key: request for keys your callers name`); w.Code != 400 || body(w) != want {
		t.Errorf("batch: %d %s\nwant 400 %s", w.Code, body(w), want)
	}
	if got := f.remaining("total", ""); got != "98" {
		t.Errorf("total remaining %s after the bad batch, want 98", got)
	}
}

// TestSharedWithMiddleware: a check spends the same count as the requests
// the middleware decides with the same engine, for a rule keyed by ip (the
// key is the address) as for one keyed by a header (the key is its value).
func TestSharedWithMiddleware(t *testing.T) {
	f := setup(t, rulesYAML+ipYAML[len("\nrules:\n"):])
	mw := httplimit.New(f.engine, httplimit.WithClock(f.clock.Now))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func(method, target, apiKey string) int {
		r := httptest.NewRequest(method, target, nil)
		r.RemoteAddr = "[2001:db8::7]:4321"
		if apiKey != "" {
			r.Header.Set("X-API-Key", apiKey)
		}
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, r)
		return w.Code
	}
	if got := send("GET", "/search", "abc"); got != 200 {
		t.Fatalf("GET /search through the middleware: %d", got)
	}
	if got := send("POST", "/login", ""); got != 200 {
		t.Fatalf("POST /login through the middleware: %d", got)
	}
	for _, c := range []struct{ rule, key, want string }{
		{"search", "abc", "1"},
		{"login", "2001:db8::7", "1"},
		{"login", "2001:db8::/64", "1"},
		{"total", "", "98"}, // a global rule's one count: both requests
	} {
		if got := f.remaining(c.rule, c.key); got != c.want {
			t.Errorf("%s/%s remaining %s after the middleware's request, want %s", c.rule, c.key, got, c.want)
		}
	}
	// And the other way: checks spend what the middleware then sees.
	f.check("login", "2001:db8::1", 1)
	if got := send("POST", "/login", ""); got != 429 {
		t.Errorf("POST /login after a check spent the last: %d, want 429", got)
	}
}

// blockingStore holds every Take until release is closed.
type blockingStore struct {
	sluice.Store
	entered chan struct{}
	release chan struct{}
}

func (b *blockingStore) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.Store.Take(ctx, req)
}

func TestUpdate(t *testing.T) {
	const next = `
rules:
  - {name: fresh, match: /fresh, limit: 1, period: 1s}
`
	// A request in flight when the rules change completes under the old ones.
	c := storetest.NewClock()
	bs := &blockingStore{Store: memory.New(memory.WithClock(c.Now)), entered: make(chan struct{}, 1), release: make(chan struct{})}
	f := setupWith(t, sluice.New(bs, sluice.WithClock(c.Now)), c, rulesYAML)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.check("search", "a", 1) }()
	<-bs.entered
	f.engine.Update(compile(t, next))
	close(bs.release)
	if w := <-done; w.Code != 200 || !strings.Contains(body(w), `"name":"search-1m"`) {
		t.Errorf("in-flight request: %d %s, want 200 under the old rule", w.Code, w.Body)
	}
	bs.entered = make(chan struct{}, 100)
	// Old rule unknown, new rule known.
	if w := f.check("search", "a", 1); w.Code != 400 || body(w) != errBody("BAD_REQUEST", `unknown rule "search"; known rules: fresh`) {
		t.Errorf("old rule after Update: %d %s", w.Code, w.Body)
	}
	if w := f.check("fresh", "192.0.2.1", 1); w.Code != 200 {
		t.Errorf("new rule after Update: %d %s", w.Code, w.Body)
	}
	f.engine.Update(nil)
	if w := f.check("fresh", "192.0.2.1", 1); w.Code != 400 || body(w) != errBody("BAD_REQUEST", `unknown rule "fresh"; no rules are configured`) {
		t.Errorf("after Update(nil): %d %s", w.Code, w.Body)
	}

	// Under the race detector: requests while the rules keep changing get
	// either the old or the new rule, never anything else.
	g := setup(t, rulesYAML)
	sets := []*policy.RuleSet{compile(t, rulesYAML), compile(t, rulesYAML+"  - {name: fresh, match: /fresh, limit: 100, period: 1s}\n")}
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			g.engine.Update(sets[i%2])
		}
	})
	for range 4 {
		wg.Go(func() {
			for range 200 {
				w := g.check("fresh", "192.0.2.1", 0)
				if w.Code != 200 && !(w.Code == 400 && strings.Contains(body(w), `unknown rule \"fresh\"`)) {
					t.Errorf("during Update: %d %s", w.Code, w.Body)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
}

func TestHealth(t *testing.T) {
	var failing atomic.Bool
	f := setup(t, rulesYAML, WithReady(func(ctx context.Context) error {
		if failing.Load() {
			return errors.New("redis: connection refused")
		}
		return nil
	}))
	for _, tt := range []struct {
		path string
		fail bool
		code int
		body string
	}{
		{"/healthz", false, 200, `{"status":"ok"}`},
		{"/healthz", true, 200, `{"status":"ok"}`},
		{"/readyz", false, 200, `{"status":"ok","breaker":"closed"}`},
		{"/readyz", true, 503, `{"status":"unavailable","error":"redis: connection refused","breaker":"closed"}`},
	} {
		failing.Store(tt.fail)
		if w := f.do("GET", tt.path, "", ""); w.Code != tt.code || body(w) != tt.body {
			t.Errorf("%s (probe failing %v): %d %s, want %d %s", tt.path, tt.fail, w.Code, body(w), tt.code, tt.body)
		}
	}
	// Without a probe: always ready.
	if w := setup(t, rulesYAML).do("GET", "/readyz", "", ""); w.Code != 200 {
		t.Errorf("default readyz: %d %s", w.Code, w.Body)
	}
}

// partialErr is a readiness error of a store some of whose nodes serve,
// as the Redis store's ReadyError is when some Cluster masters fail.
type partialErr struct {
	failing []string
	serving bool
}

func (e partialErr) Error() string      { return "masters failing: " + strings.Join(e.failing, ", ") }
func (e partialErr) Degraded() []string { return e.failing }
func (e partialErr) Serving() bool      { return e.serving }

// TestReadyDegraded: a probe error that says the store still serves some
// keys answers 200 "degraded", naming the failing nodes; one that says
// none serve, 503; Serving sees through wrapping.
func TestReadyDegraded(t *testing.T) {
	var probe error
	f := setup(t, rulesYAML, WithReady(func(ctx context.Context) error { return probe }))
	for _, tt := range []struct {
		err  error
		code int
		body string
	}{
		{fmt.Errorf("not ready: %w", partialErr{[]string{"b:2", "a:1"}, true}), 200,
			`{"status":"degraded","error":"not ready: masters failing: b:2, a:1","breaker":"closed","degraded":["a:1","b:2"]}`},
		{partialErr{[]string{"a:1", "b:2", "c:3"}, false}, 503,
			`{"status":"unavailable","error":"masters failing: a:1, b:2, c:3","breaker":"closed","degraded":["a:1","b:2","c:3"]}`},
	} {
		probe = tt.err
		if w := f.do("GET", "/readyz", "", ""); w.Code != tt.code || body(w) != tt.body {
			t.Errorf("probe %v: %d %s, want %d %s", tt.err, w.Code, body(w), tt.code, tt.body)
		}
	}
	if Serving(errors.New("refused")) || Serving(nil) {
		t.Errorf("Serving of an error that says nothing of nodes, or of nil: true")
	}
}

// TestUpdateKeepsOwnCopy: the compiled rules are the engine's own copy,
// so that changing the File's rules after Update changes nothing.
func TestUpdateKeepsOwnCopy(t *testing.T) {
	f := setup(t, rulesYAML)
	file := parse(t, rulesYAML)
	set, err := file.Compile()
	if err != nil {
		t.Fatal(err)
	}
	f.engine.Update(set)
	file.Rules[0] = file.Rules[1] // "search" overwritten with "export"
	file.Rules[2].Cost = 5
	file.Rules[2].Limits[0].Limit = 5
	if w := f.post("/v1/check", `{"rule":"search","key":"a"}`); w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "2" {
		t.Errorf("search after the File changed: %d %v %s; want search's limit 2", w.Code, w.Header(), w.Body)
	}
	if w := f.post("/v1/check", `{"rule":"shadowed","key":"a"}`); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("shadowed after the File changed: %d %v %s; want cost 1 of 1", w.Code, w.Header(), w.Body)
	}
}

// TestUpdateKeepsOwnPlans: the plans' keys and prefixes are the compiled
// rules' own too.
func TestUpdateKeepsOwnPlans(t *testing.T) {
	file := parse(t, `
rules:
  - name: api
    key: "header:X-API-Key"
    limit: 1
    period: 1h
    plans:
      - {name: pro, keys: [gold], prefixes: ["partner-"], limit: 5, period: 1h}
`)
	set, err := file.Compile()
	if err != nil {
		t.Fatal(err)
	}
	f := setup(t, rulesYAML)
	f.engine.Update(set)
	file.Rules[0].Plans[0].Keys[0] = "free"
	file.Rules[0].Plans[0].Prefixes[0] = "f"
	for key, want := range map[string]string{"gold": "5", "partner-x": "5", "free": "1", "fx": "1"} {
		if w := f.check("api", key, 0); w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != want {
			t.Errorf("api for %s after the File's plan changed: %d %v; want limit %s", key, w.Code, w.Header(), want)
		}
	}
}

// TestUpdateNamesLimits: the limits of rules built in code are named as a
// policy file names them, so two rules with equal unnamed limits keep
// their own counts for one key, and the caller's rules are left unnamed.
func TestUpdateNamesLimits(t *testing.T) {
	f := setup(t, rulesYAML)
	rules := []policy.Rule{
		{Name: "a", Key: policy.Key{Source: policy.KeyHeader, Name: "X-API-Key"}, Limits: []sluice.Limit{sluice.PerMinute(1)}},
		{Name: "b", Group: "b", Key: policy.Key{Source: policy.KeyHeader, Name: "X-API-Key"}, Limits: []sluice.Limit{sluice.PerMinute(1)}},
	}
	set, err := policy.Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	f.engine.Update(set)
	for _, rule := range []string{"a", "b"} {
		w := f.check(rule, "k", 1)
		if w.Code != 200 || !strings.Contains(w.Header().Get("RateLimit-Policy"), `"`+rule+`-1m"`) {
			t.Errorf("rule %s, first request for k: %d %v %s; want 200 under policy %q", rule, w.Code, w.Header(), w.Body, rule+"-1m")
		}
	}
	if name := rules[0].Limits[0].Name; name != "" {
		t.Errorf("Compile named the caller's limit %q", name)
	}
}
