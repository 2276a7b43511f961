package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
)

// TestSeriesFromStart: before any event, a scrape shows every series at
// zero: each door's latency, each store operation's errors, both reload
// results, and each outcome, settled units and slots held of each rule
// Rules names, including a rule a reload added.
func TestSeriesFromStart(t *testing.T) {
	m := metrics.New()
	rules := []string{"login", "api"}
	m.Rules(func() []string { return rules })
	want := []string{
		`sluice_store_errors_total{op="take"} 0`,
		`sluice_store_errors_total{op="reset"} 0`,
		`sluice_store_errors_total{op="peek"} 0`,
		`sluice_config_reloads_total{result="ok"} 0`,
		`sluice_config_reloads_total{result="rejected"} 0`,
		`sluice_fallbacks_total 0`,
		`sluice_breaker_open 0`,
		`sluice_breaker_opens_total 0`,
		`sluice_envoy_unknown_domain_total 0`,
		`sluice_store_duration_seconds_count{op="take"} 0`,
	}
	for _, d := range metrics.Doors {
		want = append(want, `sluice_decision_duration_seconds_count{door="`+d.String()+`"} 0`)
	}
	series := func(rules ...string) []string {
		var out []string
		for _, r := range rules {
			for _, o := range policy.Outcomes {
				out = append(out, `sluice_decisions_total{outcome="`+o.String()+`",rule="`+r+`"} 0`)
			}
			out = append(out, `sluice_settled_units_total{kind="refunded",rule="`+r+`"} 0`, `sluice_settled_units_total{kind="charged",rule="`+r+`"} 0`,
				`sluice_slots_held{rule="`+r+`"} 0`)
		}
		return out
	}
	text := scrape(t, m)
	for _, s := range append(want, series(rules...)...) {
		if !strings.Contains(text, s+"\n") {
			t.Errorf("first scrape lacks %s", s)
		}
	}
	rules = append(rules, "search") // a reload added a rule
	text = scrape(t, m)
	for _, s := range series("login", "search") {
		if !strings.Contains(text, s+"\n") {
			t.Errorf("scrape after a reload lacks %s", s)
		}
	}
	if strings.Count(text, "sluice_decisions_total{") != 3*len(policy.Outcomes) {
		t.Errorf("want %d decision series, got:\n%s", 3*len(policy.Outcomes), grep(text, "sluice_decisions_total{"))
	}
	// Rules(nil) names none, and the series shown stay.
	m.Rules(nil)
	if text := scrape(t, m); strings.Count(text, "sluice_decisions_total{") != 3*len(policy.Outcomes) {
		t.Errorf("after Rules(nil): want %d decision series, got:\n%s", 3*len(policy.Outcomes), grep(text, "sluice_decisions_total{"))
	}
}

// TestDoorLatency: Time records one observation of its door per request,
// ObserveDoor one of the door it names, and no other door's; an unknown
// door none.
func TestDoorLatency(t *testing.T) {
	m := metrics.New()
	h := m.Time(metrics.DoorHTTP, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond)
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", nil))
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("Time changed the answer: %d", w.Code)
		}
	}
	m.ObserveDoor(metrics.DoorGRPC, time.Millisecond)
	// A Door that is none of Doors is recorded nowhere, and panics
	// nowhere.
	m.ObserveDoor(metrics.Door(len(metrics.Doors)), time.Millisecond)
	m.Time(metrics.Door(200), http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	text := scrape(t, m)
	for _, s := range []string{
		`sluice_decision_duration_seconds_count{door="http"} 3`,
		`sluice_decision_duration_seconds_bucket{door="http",le="0.001"} 0`, // each took 2ms or more
		`sluice_decision_duration_seconds_count{door="grpc"} 1`,
		`sluice_decision_duration_seconds_count{door="json"} 0`,
		`sluice_decision_duration_seconds_count{door="proxy"} 0`,
	} {
		if !strings.Contains(text, s+"\n") {
			t.Errorf("scrape lacks %s:\n%s", s, grep(text, "sluice_decision_duration_seconds_count"))
		}
	}
}
