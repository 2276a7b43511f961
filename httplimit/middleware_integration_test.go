//go:build integration

package httplimit_test

import (
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestStoreDown: the Limiter's error policy decides, and responses carry no
// rate-limit numbers, which would be made up.
func TestStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redis.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv.Stop()
	const yaml = `
rules:
  - {name: r, key: ip, limit: 5, period: 1m}
`
	clock := storetest.NewClock()
	for _, tt := range []struct {
		policy     sluice.ErrorPolicy
		code       int
		says       string
		retryAfter string
	}{
		{sluice.AllowOnError, 200, "ok", ""},
		// Not a 429: the client did nothing wrong, and there is no quota to name.
		{sluice.DenyOnError, 503, "RATE_LIMITER_UNAVAILABLE", "1"},
		{sluice.ReturnErrors, 200, "ok", ""}, // the middleware lets the request through and logs
	} {
		f := serve(t, clock, policy.New(sluice.New(store, sluice.WithErrorPolicy(tt.policy)), compile(t, yaml), quiet))
		w := f.do(req{target: "/"})
		if w.Code != tt.code || !strings.Contains(w.Body.String(), tt.says) || w.Header().Get("RateLimit") != "" || w.Header().Get("X-RateLimit-Remaining") != "" {
			t.Errorf("%s: %d %v %s; want %d saying %s, without rate-limit numbers", tt.policy, w.Code, w.Header(), w.Body, tt.code, tt.says)
		}
		if got := w.Header().Get("Retry-After"); got != tt.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", tt.policy, got, tt.retryAfter)
		}
	}
	// A local fallback's denial is a real one: 429, still without numbers.
	f := serve(t, clock, policy.New(sluice.New(store, sluice.WithErrorPolicy(sluice.LocalOnError(memory.New()))), compile(t, `
rules:
  - {name: r, key: ip, limit: 1, period: 1m}
`), quiet))
	if a, b := f.do(req{target: "/"}), f.do(req{target: "/"}); a.Code != 200 || b.Code != 429 || b.Header().Get("RateLimit") != "" {
		t.Errorf("local fallback: %d then %d %v; want 200 then 429 without rate-limit numbers", a.Code, b.Code, b.Header())
	}
}
