package metrics_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
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
		m.Breaker(sluice.NodeBreaker{Node: node, Name: name, State: state, Err: err})
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
