//go:build integration

package metrics_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
)

// TestMetrics: Metrics.Decision, as an engine's observer, counts every
// rule's outcome of every decision, and the instrumented store its calls.
func TestMetrics(t *testing.T) {
	m := metrics.New()
	// Three stacked rules: login denies the third request, site then
	// counts it as denied by another rule, and probe (in shadow mode) is
	// decided only for the two admitted requests.
	e := engine(t, m, sluice.New(memory.New(), sluice.WithHooks(m.Hooks())), `
rules:
  - {name: login, match: /login, key: ip, limit: 2, period: 1m}
  - {name: site, group: site, key: ip, limit: 100, period: 1m}
  - {name: probe, group: probe, key: ip, limit: 1, period: 1h, shadow: true}
`)
	for range 3 {
		r := httptest.NewRequest("POST", "/login", nil)
		if _, err := e.Decide(r); err != nil {
			t.Fatal(err)
		}
	}
	m.Reload(nil)
	m.Reload(errors.New("rejected"))
	m.Reload(errors.New("rejected"))

	// A store that fails counts its errors, and each error policy's
	// decision is a fallback.
	srv := redistest.Start(t)
	rs, err := redis.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	srv.Stop()
	for _, p := range []sluice.ErrorPolicy{sluice.AllowOnError, sluice.DenyOnError} {
		failing := engine(t, m, sluice.New(rs, sluice.WithHooks(m.Hooks()), sluice.WithErrorPolicy(p)), `
rules:
  - {name: login, key: ip, limit: 2, period: 1m}
`)
		d, err := failing.Decide(httptest.NewRequest("POST", "/login", nil))
		if err != nil || d.Degraded == sluice.NotDegraded {
			t.Fatalf("%s on a stopped server: %+v, %v; want a degraded decision", p, d, err)
		}
	}

	text := scrape(t, m)
	for _, want := range []string{
		`sluice_decisions_total{outcome="allowed",rule="login"} 2`,
		`sluice_decisions_total{outcome="denied",rule="login"} 1`,
		`sluice_decisions_total{outcome="allowed",rule="site"} 2`,
		`sluice_decisions_total{outcome="denied_by_other",rule="site"} 1`,
		`sluice_decisions_total{outcome="allowed",rule="probe"} 1`,
		`sluice_decisions_total{outcome="shadow_denied",rule="probe"} 1`,
		`sluice_decisions_total{outcome="degraded_allowed",rule="login"} 1`,
		`sluice_decisions_total{outcome="degraded_denied",rule="login"} 1`,
		`sluice_fallbacks_total 2`,
		`sluice_config_reloads_total{result="ok"} 1`,
		`sluice_config_reloads_total{result="rejected"} 2`,
		// Two decisions of two calls (the stacked rules, then probe), one
		// of one (denied: probe is not decided), and two failed calls.
		`sluice_store_duration_seconds_count{op="take"} 7`,
		`sluice_store_errors_total{op="take"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, `outcome="denied",rule="probe"`) {
		t.Errorf("a shadow rule counted as denied:\n%s", text)
	}
}

// TestBreaker: the breaker's changes show as sluice_breaker_open and
// sluice_breaker_opens_total.
func TestBreaker(t *testing.T) {
	m := metrics.New()
	srv := redistest.Start(t)
	rs, err := redis.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	lim := sluice.New(rs, sluice.WithErrorPolicy(sluice.AllowOnError), sluice.WithHooks(sluice.Hooks{Breaker: m.Breaker}),
		sluice.WithBreaker(sluice.Breaker{Failures: 2, Span: time.Nanosecond, Probe: time.Millisecond}))
	allow := func() {
		if _, err := lim.Allow(context.Background(), "k", sluice.PerMinute(100)); err != nil {
			t.Fatal(err)
		}
	}
	if text := scrape(t, m); !strings.Contains(text, "sluice_breaker_open 0") {
		t.Errorf("before any failure, metrics lack sluice_breaker_open 0")
	}
	srv.Stop()
	allow()
	allow()
	text := scrape(t, m)
	for _, want := range []string{"sluice_breaker_open 1", "sluice_breaker_opens_total 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("with Redis down, metrics lack %s", want)
		}
	}
	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for lim.Breaker() != sluice.BreakerClosed && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		allow()
	}
	if text := scrape(t, m); !strings.Contains(text, "sluice_breaker_open 0") || !strings.Contains(text, "sluice_breaker_opens_total 1") {
		t.Errorf("after Redis came back, metrics lack sluice_breaker_open 0 and sluice_breaker_opens_total 1")
	}
}
