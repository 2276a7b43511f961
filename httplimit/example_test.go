package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/store/memory"
)

func Example() {
	policy, err := config.Parse("sluice.yaml", []byte(`
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
	lim := sluice.New(memory.New(), sluice.WithClock(fixed))
	limit := httplimit.New(lim, policy.Rules, httplimit.WithClock(fixed))

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

// fixed is a clock stopped at a round instant, so that the example prints
// the same numbers on every run.
func fixed() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }
