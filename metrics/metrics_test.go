package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
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

// engine returns an engine deciding with lim under the rules of yaml,
// observed by m.
func engine(t *testing.T, m *metrics.Metrics, lim *sluice.Limiter, yaml string) *policy.Engine {
	t.Helper()
	f, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return policy.New(lim, set, policy.WithObserver(m.Decision), policy.WithLogger(slog.New(slog.DiscardHandler)))
}

// TestMetrics: Metrics.Decision, as an engine's observer, counts every
// rule's outcome of every decision, and the instrumented store its calls.
func TestMetrics(t *testing.T) {
	m := metrics.New()
	// Three stacked rules: login denies the third request, site then
	// counts it as denied by another rule, and probe (in shadow mode) is
	// decided only for the two admitted requests.
	e := engine(t, m, sluice.New(m.Store(memory.New())), `
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
		failing := engine(t, m, sluice.New(m.Store(rs), sluice.WithErrorPolicy(p)), `
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

// TestDecision: each outcome is counted under its own name; only the
// degraded ones are fallbacks.
func TestDecision(t *testing.T) {
	m := metrics.New()
	for _, o := range policy.Outcomes {
		m.Decision("r", "k", o)
	}
	text := scrape(t, m)
	for _, o := range policy.Outcomes {
		if want := `sluice_decisions_total{outcome="` + o.String() + `",rule="r"} 1`; !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if want := "sluice_fallbacks_total 2"; !strings.Contains(text, want) {
		t.Errorf("metrics lack %s", want)
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
	lim := sluice.New(rs, sluice.WithErrorPolicy(sluice.AllowOnError), sluice.WithBreakerHandler(m.Breaker),
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

// TestBreakerNodeNames: a node's series follows its name (a Cluster
// shard's new master): the old name's series goes; sluice_breaker_open is
// 1 while any node's breaker is open; a node without a name (a store of
// one node) has no series of its own.
func TestBreakerNodeNames(t *testing.T) {
	m := metrics.New()
	change := func(node int, name string, state sluice.BreakerState) {
		var err error
		if state == sluice.BreakerOpen {
			err = errors.New("down")
		}
		m.Breaker(sluice.BreakerChange{NodeBreaker: sluice.NodeBreaker{Node: node, Name: name, State: state}, Err: err})
	}
	for _, step := range []struct {
		do       func()
		want     []string
		wantNone []string
	}{
		{func() { change(1, "a:1", sluice.BreakerOpen); change(2, "b:2", sluice.BreakerOpen) },
			[]string{`sluice_breaker_node_open{node="a:1"} 1`, `sluice_breaker_node_open{node="b:2"} 1`, "sluice_breaker_open 1", "sluice_breaker_opens_total 2"}, nil},
		{func() { change(2, "b:2", sluice.BreakerClosed) },
			[]string{`sluice_breaker_node_open{node="b:2"} 0`, "sluice_breaker_open 1"}, nil},
		{func() { change(1, "c:3", sluice.BreakerClosed) }, // node 1's replica took over
			[]string{`sluice_breaker_node_open{node="c:3"} 0`, "sluice_breaker_open 0"}, []string{`node="a:1"`}},
		{func() { change(0, "", sluice.BreakerOpen) },
			[]string{"sluice_breaker_open 1", "sluice_breaker_opens_total 3"}, []string{`node=""`}},
	} {
		step.do()
		text := scrape(t, m)
		for _, want := range step.want {
			if !strings.Contains(text, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		for _, no := range step.wantNone {
			if strings.Contains(text, no) {
				t.Errorf("metrics hold %s", no)
			}
		}
	}
}

// TestDecisionConcurrent: decisions counted from many goroutines at once,
// for rules first seen concurrently, all count.
func TestDecisionConcurrent(t *testing.T) {
	m := metrics.New()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				m.Decision("r"+strconv.Itoa(i%5), "k", policy.Outcomes[(g+i)%2])
			}
		})
	}
	wg.Wait()
	text := scrape(t, m)
	for i := range 5 {
		for _, o := range policy.Outcomes[:2] {
			if want := `sluice_decisions_total{outcome="` + o.String() + `",rule="r` + strconv.Itoa(i) + `"} 80`; !strings.Contains(text, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	}
}

// BenchmarkDecision measures counting one decision, as every request of
// sluice serve does, from parallel callers over 10 rules:
//
//	go test -run '^$' -bench Decision -benchmem ./metrics/
func BenchmarkDecision(b *testing.B) {
	m := metrics.New()
	rules := make([]string, 10)
	for i := range rules {
		rules[i] = "rule-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			m.Decision(rules[i%len(rules)], "k", policy.Allowed)
		}
	})
}
