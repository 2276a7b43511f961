package policyfile_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/sluice-go/sluice/policyfile"
)

func Example() {
	path := exampleFile(`
# redis: {url: redis://127.0.0.1:6379/0}   # every replica then shares the counts
rules:
  - name: per-ip             # every request, by client address
    key: ip
    limit: 100
    period: 1s
  - name: login              # logins also, the strictest
    group: auth              # another group: both rules apply
    match: POST /api/auth/login
    key: ip
    algorithm: sliding_log
    limit: 2
    period: 1m
`) // (setup)
	defer os.RemoveAll(filepath.Dir(path)) // (setup)
	p, err := policyfile.Open(path, policyfile.WithLogger(quiet))
	if err != nil {
		panic(err) // names the file, line and field of every mistake
	}
	defer p.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/auth/login", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "welcome")
	})
	handler := p.Middleware(mux)

	// Try it: three logins from one address.
	for range 3 {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("POST", "/api/auth/login", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "per-ip-1s";q=100;w=1, "login-1m";q=2;w=60
	// 200 "per-ip-1s";q=100;w=1, "login-1m";q=2;w=60
	// 429 "per-ip-1s";q=100;w=1, "login-1m";q=2;w=60
}

// quiet discards the log: the example prints only what clients get.
var quiet = slog.New(slog.DiscardHandler)

// exampleFile writes a policy file to a temporary directory and returns
// its path.
func exampleFile(content string) string {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		panic(err)
	}
	return path
}
