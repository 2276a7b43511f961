package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
)

// scrape returns the exposition text of m.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(w.Result().Body)
	return string(b)
}

func TestMetrics(t *testing.T) {
	m := metrics.New()
	lim := sluice.New(m.Store(memory.New()))
	ctx := context.Background()
	l := sluice.PerMinute(2)
	for range 3 {
		res, err := lim.AllowAll(ctx, "k", 1, l)
		if err != nil {
			t.Fatal(err)
		}
		m.Decision("login", res, false)
	}
	res, _ := lim.AllowAll(ctx, "k", 1, l)
	m.Decision("probe", res, true)
	m.Decision("login", sluice.MultiResult{Result: sluice.Result{Allowed: true, Degraded: sluice.DegradedAllow}}, false)
	m.Reload(true)
	m.Reload(false)
	m.Reload(false)

	// A store that fails counts its errors.
	srv := redistest.Start(t)
	rs, err := redis.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	srv.Stop()
	failing := sluice.New(m.Store(rs))
	if _, err := failing.Allow(ctx, "k", l); err == nil {
		t.Fatal("no error from a stopped server")
	}

	text := scrape(t, m)
	for _, want := range []string{
		`sluice_decisions_total{outcome="allowed",rule="login"} 2`,
		`sluice_decisions_total{outcome="denied",rule="login"} 1`,
		`sluice_decisions_total{outcome="shadow_denied",rule="probe"} 1`,
		`sluice_decisions_total{outcome="degraded_allowed",rule="login"} 1`,
		`sluice_fallbacks_total 1`,
		`sluice_config_reloads_total{result="ok"} 1`,
		`sluice_config_reloads_total{result="rejected"} 2`,
		`sluice_store_duration_seconds_count{op="take"} 5`,
		`sluice_store_errors_total{op="take"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
