package ginlimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/examples/frameworks/ginlimit"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

func init() { gin.SetMode(gin.ReleaseMode) }

type ctxKey struct{}

// TestWrap runs net/http middleware through Wrap in a real gin router
// over loopback: what the middleware lets through reaches the handlers
// after it, with the request it passed; what it answers stops the chain.
func TestWrap(t *testing.T) {
	set, err := policy.Compile([]policy.Rule{{Name: "r", Limits: []sluice.Limit{sluice.PerMinute(2).Using(sluice.SlidingLog)}}})
	if err != nil {
		t.Fatal(err)
	}
	limit := httplimit.New(policy.New(sluice.New(memory.New()), set))
	tests := []struct {
		name string
		mw   func(http.Handler) http.Handler
		// want: the status, body and X-Mw field of each request in turn
		status []int
		body   []string
		field  string // the value of the X-Ratelimit-Limit field of each response
	}{
		{
			name: "passes, with its own request",
			mw: func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, "from the middleware")))
				})
			},
			status: []int{200, 200},
			body:   []string{"handler: from the middleware", "handler: from the middleware"},
		},
		{
			name: "answers itself",
			mw: func(http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					http.Error(w, "no", http.StatusForbidden)
				})
			},
			status: []int{403},
			body:   []string{"no\n"},
		},
		{
			name:   "sluice: 2 a minute",
			mw:     limit,
			status: []int{200, 200, 429},
			body: []string{"handler: <nil>", "handler: <nil>",
				`{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded; retry after 60 seconds","retry_after":60}}` + "\n"},
			field: "2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after := 0 // runs of the middleware after Wrap's
			r := gin.New()
			r.Use(ginlimit.Wrap(tt.mw), func(c *gin.Context) { after++; c.Next() })
			r.GET("/", func(c *gin.Context) {
				c.String(http.StatusOK, "handler: %v", c.Request.Context().Value(ctxKey{}))
			})
			srv := httptest.NewServer(r)
			defer srv.Close()
			client := &http.Client{Timeout: 10 * time.Second}
			passed := 0
			for i, want := range tt.status {
				resp, err := client.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want || string(body) != tt.body[i] {
					t.Errorf("request %d: %d %q, want %d %q", i+1, resp.StatusCode, body, want, tt.body[i])
				}
				if got := resp.Header.Get("X-RateLimit-Limit"); got != tt.field {
					t.Errorf("request %d: X-RateLimit-Limit %q, want %q", i+1, got, tt.field)
				}
				if want == http.StatusOK {
					passed++
				}
			}
			if after != passed {
				t.Errorf("the middleware after Wrap ran %d times, want %d (once per request let through)", after, passed)
			}
		})
	}
}
