//go:build integration

package policyfile_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
)

// TestReloadKeepsCounts: a reload that raises or lowers a rule's limit
// keeps what each client has spent, for every algorithm, on the memory
// store and on Redis: 80 spent of 100 per period, raised to 150, leaves 70;
// lowered to 50, the client is denied. A new period starts afresh. The
// period (1000h) leaves no refill and no window boundary within the test.
func TestReloadKeepsCounts(t *testing.T) {
	srv := redistest.Start(t)
	for _, store := range []struct{ name, section string }{
		{"memory", ""},
		// A generous timeout, and on_error deny: on a loaded machine a
		// slow call must wait, not be answered by the local fallback's
		// fresh counts.
		{"redis", "redis: {url: redis://" + srv.Addr + ", timeout: 10s, on_error: deny}\n"},
	} {
		for _, a := range sluice.Algorithms {
			t.Run(store.name+"/"+string(a), func(t *testing.T) {
				file := func(limit int, period string) string {
					// Each subtest its own rule name: its own keys in the shared Redis.
					return store.section + fmt.Sprintf("rules:\n  - {name: r-%s, key: ip, algorithm: %s, limit: %d, period: %s}\n", a, a, limit, period)
				}
				path := writeFile(t, file(100, "1000h"))
				p := open(t, path, nil)
				ask := func(cost int) *policy.Decision {
					t.Helper()
					d, err := p.Engine().Check(context.Background(), policy.Check{Rule: "r-" + string(a), Key: "192.0.2.7", Cost: &cost})
					if err != nil {
						t.Fatal(err)
					}
					return d
				}
				reload := func(limit int, period string) {
					t.Helper()
					rewrite(t, path, file(limit, period))
					if err := p.Reload(); err != nil {
						t.Fatal(err)
					}
				}
				if d := ask(80); !d.Allowed || d.Result().Remaining != 20 {
					t.Fatalf("spending 80 of 100: allowed %v, remaining %d", d.Allowed, d.Result().Remaining)
				}
				reload(150, "1000h")
				if d := ask(0); d.Result().Remaining != 70 {
					t.Errorf("raised to 150: remaining %d, want 70 (80 spent)", d.Result().Remaining)
				}
				reload(50, "1000h")
				if d := ask(1); d.Allowed {
					t.Errorf("lowered to 50 after 80 spent: admitted, want denied")
				}
				reload(50, "999h")
				if d := ask(0); d.Result().Remaining != 50 {
					t.Errorf("a new period: remaining %d, want a fresh 50", d.Result().Remaining)
				}
			})
		}
	}
}
