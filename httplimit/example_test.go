package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

func Example() {
	file, err := config.Parse("sluice.yaml", []byte(`
rules:
  - name: login
    match: POST /api/auth/login
    key: ip
    limits:
      - {algorithm: sliding_window, limit: 2, period: 1m}
      - {algorithm: fixed_window, limit: 20, period: 1h}
  - name: default
    key: ip
    limit: 100
    period: 1s
`))
	if err != nil {
		panic(err) // names the file, line and field of every mistake
	}
	rules, err := file.Compile()
	if err != nil {
		panic(err)
	}
	lim := sluice.New(memory.New(), sluice.WithClock(fixed))
	limit := httplimit.New(policy.New(lim, rules), httplimit.WithClock(fixed))

	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/auth/login", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "welcome")
	})
	handler := limit(mux)

	// Try it: three logins from one address.
	for range 3 {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("POST", "/api/auth/login", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
		if w.Code == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
		}
	}
	// Output:
	// 200 "login-1m";r=1;t=120, "login-1h";r=19;t=3600
	// 200 "login-1m";r=0;t=120, "login-1h";r=18;t=3600
	// 429 "login-1m";r=0;t=90, "login-1h";r=18;t=3600
	// Retry-After: 90
}

// Rules of different groups stack: every request is limited per address,
// requests under /api/ also per API key, and logins by the strictest rule
// besides. A request is admitted only if every rule that applies admits
// it, and one that is denied spends nothing. The headers list every limit
// that applies; the binding one (here the one with the fewest remaining,
// or when denied the one with the longest wait) sets the X-RateLimit-*
// fields and Retry-After.
func Example_stacked() {
	file, err := config.Parse("sluice.yaml", []byte(`
rules:
  - {name: per-ip, key: ip, algorithm: fixed_window, limit: 100, period: 1m}
  - {name: api, group: keys, match: /api/, key: "header:X-API-Key", algorithm: fixed_window, limit: 50, period: 1h}
  - {name: login, group: login, match: POST /api/auth/login, key: ip, algorithm: fixed_window, limit: 2, period: 1m}
`))
	if err != nil {
		panic(err)
	}
	rules, err := file.Compile()
	if err != nil {
		panic(err)
	}
	lim := sluice.New(memory.New(), sluice.WithClock(fixed))
	limit := httplimit.New(policy.New(lim, rules), httplimit.WithClock(fixed), httplimit.WithHeaders(httplimit.HeadersIETF))
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, target := range []string{"/", "/api/items", "/api/auth/login", "/api/auth/login", "/api/auth/login"} {
		r := httptest.NewRequest("POST", target, nil)
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, target, w.Header().Get("RateLimit"))
		if w.Code == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
		}
	}
	// Output:
	// 200 / "per-ip-1m";r=99;t=60
	// 200 /api/items "per-ip-1m";r=98;t=60, "api-1h";r=49;t=3600
	// 200 /api/auth/login "per-ip-1m";r=97;t=60, "api-1h";r=48;t=3600, "login-1m";r=1;t=60
	// 200 /api/auth/login "per-ip-1m";r=96;t=60, "api-1h";r=47;t=3600, "login-1m";r=0;t=60
	// 429 /api/auth/login "per-ip-1m";r=96;t=60, "api-1h";r=47;t=3600, "login-1m";r=0;t=60
	// Retry-After: 60
}

// fixed is a clock stopped at a round instant, so that the example prints
// the same numbers on every run.
func fixed() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }

// Example_settle limits an LLM endpoint to 100,000 tokens a minute per
// API key: each call is admitted at its reserve, 4096 tokens, and settled
// when its response ends at the tokens it reports in X-Tokens-Used, which
// the client never sees.
func Example_settle() {
	file, err := config.Parse("sluice.yaml", []byte(`
rules:
  - name: tokens
    match: POST /v1/chat
    key: header:X-API-Key
    algorithm: fixed_window
    limit: 100000
    period: 1m
    settle: {cost_from: "header:X-Tokens-Used", reserve: 4096, strip: true}
`))
	if err != nil {
		panic(err)
	}
	rules, err := file.Compile()
	if err != nil {
		panic(err)
	}
	engine := policy.New(sluice.New(memory.New(), sluice.WithClock(fixed)), rules)
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ... the model answers, and says what the answer cost ...
		w.Header().Set("X-Tokens-Used", "1200")
		fmt.Fprintln(w, "the answer")
	})
	h := httplimit.New(engine, httplimit.WithClock(fixed))(llm)

	for range 2 {
		r := httptest.NewRequest("POST", "/v1/chat", nil)
		r.Header.Set("X-API-Key", "key-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, "remaining at the reserve:", w.Header().Get("X-RateLimit-Remaining"), "| X-Tokens-Used seen:", w.Header().Get("X-Tokens-Used") != "")
	}
	// Output:
	// 200 remaining at the reserve: 95904 | X-Tokens-Used seen: false
	// 200 remaining at the reserve: 94704 | X-Tokens-Used seen: false
}
