package server

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// fuzzYAML has a rule of every key source, a plan, a cost, a rule in
// shadow mode and one that sheds by class, so that fuzzed bodies reach
// every path of a decision.
const fuzzYAML = `
rules:
  - {name: search, match: GET /search, key: "header:X-API-Key", algorithm: fixed_window, limit: 2, period: 1m}
  - {name: export, match: GET /export, key: "query:k", limit: 1, period: 1h, cost: 1,
     plans: [{name: gold, keys: [vip], limit: 5, period: 1h}]}
  - {name: login, match: POST /login, key: ip, algorithm: sliding_window, limit: 3, period: 1m}
  - {name: all, match: /all, key: global, algorithm: gcra, limit: 10, period: 1s, burst: 4}
  - {name: probe, match: /probe, key: ip, limit: 1, period: 1m, shadow: true}
  - {name: pool, key: request, algorithm: fixed_window, limit: 5, period: 1m, priority: {reserve: {critical: 20%}}}
`

// FuzzHandler sends arbitrary bodies to POST /v1/check (batch false) and
// /v1/check/batch (batch true) through the real handler over a
// memory-store engine: it never panics, always answers 200, 429, 400 or
// 413 (503 needs a failing store) with a JSON body of the API's shapes,
// and answers 400 to every body that is not valid UTF-8.
func FuzzHandler(f *testing.F) {
	for _, s := range []string{
		`{"rule":"search","key":"abc","cost":1}`,
		`{"rule":"export","key":"vip","cost":0}`,
		`{"rule":"login","key":"2001:db8:1:2::7"}`,
		`{"rule":"login","key":"2001:db8:1:2::/64"}`,
		`{"rule":"all","key":"","cost":4}`,
		`{"rule":"probe","key":"192.0.2.1","cost":2}`,
		`{"rule":"search","key":"\ufffd"}`,
		"{\"rule\":\"search\",\"key\":\"a\xffb\"}",
		`{"rule":"search","key":"a","cost":-1}`,
		`{"rule":"search","key":"a","cost":1e30}`,
		`{"rule":"nope","key":"a"}`,
		`{"rule":"search","key":"a"} {}`,
		`[{"rule":"search"}]`,
		`{"checks":[{"rule":"search","key":"a"},{"rule":"export","key":"a","cost":1},{"rule":"probe","key":"192.0.2.9"}]}`,
		`{"checks":[{"rule":"search","key":"a"},{"rule":"search","key":"a"}]}`,
		`{"checks":[]}`,
		"{\"checks\":[{\"rule\":\"search\",\"key\":\"\xc3\"}]}",
		`{"rule":"pool","key":"a","class":"critical","cost":5}`,
		`{"rule":"pool","key":"a","class":"h\u00e9"}`,
		`{"checks":[{"rule":"pool","key":"b"},{"rule":"search","key":"b","class":"x"}]}`,
	} {
		f.Add(false, []byte(s))
		f.Add(true, []byte(s))
	}
	clock := storetest.NewClock()
	lim := sluice.New(memory.New(memory.WithClock(clock.Now)), sluice.WithClock(clock.Now))
	engine := policy.New(lim, compile(f, fuzzYAML), policy.WithLogger(slog.New(slog.DiscardHandler)))
	srv := New(engine, WithClock(clock.Now))
	f.Fuzz(func(t *testing.T, batch bool, body []byte) {
		path := "/v1/check"
		if batch {
			path = "/v1/check/batch"
		}
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)

		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%s %q: Content-Type %q", path, body, ct)
		}
		out := w.Body.Bytes()
		if !json.Valid(out) {
			t.Fatalf("%s %q: %d with a body that is not JSON: %q", path, body, w.Code, out)
		}
		switch w.Code {
		case http.StatusOK, http.StatusTooManyRequests:
			var res struct {
				Allowed  *bool            `json:"allowed"`
				Policies []map[string]any `json:"policies"`
				Results  []map[string]any `json:"results"`
			}
			if err := json.Unmarshal(out, &res); err != nil || res.Allowed == nil {
				t.Fatalf("%s %q: %d %s; want a decision with allowed", path, body, w.Code, out)
			}
			if batch && (w.Code != http.StatusOK || len(res.Results) == 0) {
				t.Fatalf("%s %q: %d %s; want 200 with results", path, body, w.Code, out)
			}
			if !batch && res.Policies == nil {
				t.Fatalf("%s %q: %d %s; want policies", path, body, w.Code, out)
			}
			if !utf8.Valid(body) {
				t.Fatalf("%s %q: a body that is not UTF-8 was decided: %d %s", path, body, w.Code, out)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable:
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(out, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("%s %q: %d %s; want an error body with a code and a message", path, body, w.Code, out)
			}
		default:
			t.Fatalf("%s %q: status %d %s", path, body, w.Code, out)
		}
		if !utf8.Valid(body) && w.Code != http.StatusBadRequest && w.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s %q: %d for a body that is not UTF-8, want 400", path, body, w.Code)
		}
	})
}
