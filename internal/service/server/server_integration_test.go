//go:build integration

package server

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestStoreDown runs against a real Redis that has stopped: the Limiter's
// error policy decides, and responses carry no rate-limit headers.
func TestStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redis.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv.Stop()
	c := storetest.NewClock()
	for _, tt := range []struct {
		policy     sluice.ErrorPolicy
		code       int
		body       string
		retryAfter string
		logged     bool
	}{
		{sluice.DenyOnError, 503, errBody("RATE_LIMITER_UNAVAILABLE", "the rate limiter's store is unavailable and the error policy is deny; retry later"), "1", false},
		// No numbers: the store made none, and the error policy's would be made up.
		{sluice.AllowOnError, 200, `{"allowed":true,"retry_after_ms":0,"degraded":true,"policies":[{"name":"search-1m","allowed":true,"retry_after_ms":0}]}`, "", false},
		{sluice.ReturnErrors, 503, errBody("RATE_LIMITER_UNAVAILABLE", "the rate limiter's store is unavailable; retry later"), "", true},
	} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			f := setupWith(t, sluice.New(store, sluice.WithErrorPolicy(tt.policy), sluice.WithStoreTimeout(2*time.Second)), c, rulesYAML)
			w := f.check("search", "a", 1)
			if w.Code != tt.code || body(w) != tt.body {
				t.Errorf("%d %s\nwant %d %s", w.Code, body(w), tt.code, tt.body)
			}
			if w.Header().Get("RateLimit") != "" || w.Header().Get("X-RateLimit-Remaining") != "" {
				t.Errorf("rate-limit headers on a degraded answer: %v", w.Header())
			}
			if got := w.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tt.retryAfter)
			}
			if got := strings.Contains(f.logs.String(), "rate limit not decided"); got != tt.logged {
				t.Errorf("logged %v, want %v: %s", got, tt.logged, f.logs)
			}
			// In a batch, the answer is in the body under deny and allow.
			w = f.post("/v1/check/batch", `{"checks":[{"rule":"search","key":"a"},{"rule":"export","key":"a"}]}`)
			switch tt.policy {
			case sluice.ReturnErrors:
				if w.Code != 503 {
					t.Errorf("batch: %d %s, want 503", w.Code, w.Body)
				}
			case sluice.AllowOnError:
				want := `{"results":[` +
					`{"allowed":true,"retry_after_ms":0,"degraded":true,"policies":[{"name":"search-1m","allowed":true,"retry_after_ms":0}]},` +
					`{"allowed":true,"retry_after_ms":0,"degraded":true,"policies":[{"name":"export-1h","allowed":true,"retry_after_ms":0}]}` +
					`],"allowed":true}`
				if w.Code != 200 || body(w) != want {
					t.Errorf("batch: %d %s\nwant 200 %s", w.Code, body(w), want)
				}
			case sluice.DenyOnError:
				// The wait is the error policy's own (sluice.DegradedRetryAfter),
				// as in the 503's Retry-After; no limit, remaining or reset.
				want := `{"results":[` +
					`{"allowed":false,"retry_after_ms":1000,"degraded":true,"policies":[{"name":"search-1m","allowed":false,"retry_after_ms":1000}]},` +
					`{"allowed":false,"retry_after_ms":1000,"degraded":true,"policies":[{"name":"export-1h","allowed":false,"retry_after_ms":1000}]}` +
					`],"allowed":false}`
				if w.Code != 200 || body(w) != want {
					t.Errorf("batch: %d %s\nwant 200 %s", w.Code, body(w), want)
				}
			}
			// A rule in shadow mode never blocks, nor fails a check: it is
			// admitted, degraded (when the error policy decided), and
			// without rate-limit headers.
			w = f.check("shadowed", "a", 1)
			degraded := tt.policy != sluice.ReturnErrors
			if w.Code != 200 || !strings.HasPrefix(body(w), `{"allowed":true,`) || strings.Contains(body(w), `"degraded":true`) != degraded ||
				w.Header().Get("RateLimit") != "" || w.Header().Get("X-RateLimit-Remaining") != "" {
				t.Errorf("shadow check: %d %v %s; want 200, allowed, degraded %v, without rate-limit headers", w.Code, w.Header(), w.Body, degraded)
			}
		})
	}
	// The local fallback's numbers are real counts of this process's store:
	// reported, marked degraded, still without rate-limit headers (which
	// describe the shared quota).
	f := setupWith(t, sluice.New(store, sluice.WithErrorPolicy(sluice.LocalOnError(memory.New(memory.WithClock(c.Now)))), sluice.WithClock(c.Now)), c, rulesYAML)
	for i, want := range []string{
		`{"allowed":true,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":0,"degraded":true,"policies":[{"name":"search-1m","allowed":true,"limit":2,"remaining":1,"reset_after_ms":60000,"retry_after_ms":0}]}`,
		`{"allowed":true,"limit":2,"remaining":0,"reset_after_ms":60000,"retry_after_ms":0,"degraded":true,"policies":[{"name":"search-1m","allowed":true,"limit":2,"remaining":0,"reset_after_ms":60000,"retry_after_ms":0}]}`,
		`{"allowed":false,"limit":2,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"degraded":true,"policies":[{"name":"search-1m","allowed":false,"limit":2,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000}]}`,
	} {
		w := f.check("search", "a", 1)
		code := 200
		if i == 2 {
			code = 429
		}
		if w.Code != code || body(w) != want || w.Header().Get("RateLimit") != "" || w.Header().Get("X-RateLimit-Remaining") != "" {
			t.Errorf("local fallback, check %d: %d %v %s\nwant %d %s without rate-limit headers", i, w.Code, w.Header(), body(w), code, want)
		}
	}
}
