package admin

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// TestQuantile: the values Prometheus' histogram_quantile computes for
// the same buckets (linear interpolation within the bucket holding the
// rank; the highest finite bound for a rank in +Inf; NaN without
// observations).
func TestQuantile(t *testing.T) {
	bounds := []float64{0.1, 0.2, 0.5}
	for _, tc := range []struct {
		name   string
		counts []float64 // cumulative, finite buckets
		total  float64   // the +Inf bucket
		q      float64
		want   float64
	}{
		{"median in the second bucket", []float64{10, 30, 40}, 50, 0.5, 0.175},
		{"in the first bucket, from 0", []float64{10, 30, 40}, 50, 0.1, 0.05},
		{"at a bucket's top", []float64{10, 30, 40}, 50, 0.6, 0.2},
		{"in +Inf: the highest finite bound", []float64{10, 30, 40}, 50, 0.9, 0.5},
		{"empty buckets below", []float64{0, 0, 5}, 5, 0.5, 0.35},
		{"p99 of one bucket", []float64{100, 100, 100}, 100, 0.99, 0.099},
		{"no observations", []float64{0, 0, 0}, 0, 0.5, math.NaN()},
		{"q above 1", []float64{1, 1, 1}, 1, 1.5, math.Inf(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := quantile(tc.q, bounds, tc.counts, tc.total)
			if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-tc.want) > 1e-12) {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

// TestSamplerSeries: the per-second rates are the differences of
// sluice_decisions_total between samples, per rule and outcome, and the
// latency covers the samples of the last minute only.
func TestSamplerSeries(t *testing.T) {
	m := metrics.New()
	s := newSampler(m.Gatherer(), 10)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	decide := func(rule string, o policy.Outcome, n int) {
		for range n {
			m.Decision(rule, "k", o)
		}
	}
	s.sample(t0)
	decide("login", policy.Allowed, 4)
	decide("login", policy.Denied, 2)
	s.sample(t0.Add(time.Second))
	decide("login", policy.Denied, 6)
	decide("search", policy.ShadowDenied, 3)
	s.sample(t0.Add(3 * time.Second)) // a step of 2s
	series, _ := s.series(10)
	if series.Steps != 2 || len(series.Rules) != 2 || !series.Start.Equal(t0.Add(time.Second)) {
		t.Fatalf("series %+v, want 2 steps of 2 rules from t0+1s", series)
	}
	login, search := series.Rules[0], series.Rules[1]
	for _, c := range []struct {
		name      string
		got, want []float64
	}{
		{"login allowed", login.PerSecond["allowed"], []float64{4, 0}},
		{"login denied", login.PerSecond["denied"], []float64{2, 3}},
		{"search shadow_denied", search.PerSecond["shadow_denied"], []float64{0, 1.5}},
		{"degraded", series.Degraded, []float64{0, 0}},
	} {
		if len(c.got) != len(c.want) || c.got[0] != c.want[0] || c.got[1] != c.want[1] {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if login.Window["denied"] != 8 || login.Total["allowed"] != 4 || search.Window["shadow_denied"] != 3 {
		t.Errorf("windows %v %v, totals %v", login.Window, search.Window, login.Total)
	}
	// The last step only.
	series, _ = s.series(1)
	if series.Steps != 1 || series.Rules[0].PerSecond["denied"][0] != 3 || series.Rules[0].Window["denied"] != 6 {
		t.Errorf("one step: %+v", series.Rules[0])
	}
	// Degraded decisions are counted as fallbacks.
	decide("login", policy.DegradedDenied, 5)
	s.sample(t0.Add(4 * time.Second))
	if series, _ = s.series(1); series.Degraded[0] != 5 || series.Rules[0].PerSecond["degraded_denied"][0] != 5 {
		t.Errorf("degraded %v, login %v, want 5/s each", series.Degraded, series.Rules[0].PerSecond)
	}
	// A rule's settled units since the start; none for a rule that
	// settled nothing.
	m.Settled("login", 3096, 0)
	m.Settled("login", 0, 150)
	s.sample(t0.Add(5 * time.Second))
	series, _ = s.series(1)
	if got := series.Rules[0].Settled; got["refunded"] != 3096 || got["charged"] != 150 || series.Rules[1].Settled != nil {
		t.Errorf("settled %v and %v, want login's 3096 refunded and 150 charged, search's none", got, series.Rules[1].Settled)
	}
	// The ring holds 11 samples: older ones are gone.
	for i := range 20 {
		s.sample(t0.Add(time.Duration(6+i) * time.Second))
	}
	if series, _ = s.series(1000); series.Steps != 10 || series.Rules[0].Window["denied"] != 0 {
		t.Errorf("after 20 more samples: %d steps, window %v; want 10 and nothing", series.Steps, series.Rules[0].Window)
	}
}

func TestSamplerLatency(t *testing.T) {
	m := metrics.New()
	lim := sluice.New(memory.New(), sluice.WithHooks(m.Hooks()))
	s := newSampler(m.Gatherer(), 600)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.sample(t0)
	if _, lat := s.series(60); lat.P50 != nil {
		t.Errorf("latency of one sample: %+v, want none", lat)
	}
	for i := range 200 {
		if _, err := lim.Allow(context.Background(), "k"+string(rune('a'+i%26)), sluice.PerSecond(1000)); err != nil {
			t.Fatal(err)
		}
	}
	s.sample(t0.Add(30 * time.Second))
	_, lat := s.series(60)
	if lat.Calls != 200 || lat.P50 == nil || lat.P90 == nil || lat.P99 == nil || lat.WindowSeconds != 30 {
		t.Fatalf("latency %+v, want percentiles of 200 calls over 30s", lat)
	}
	if !(*lat.P50 > 0 && *lat.P50 <= *lat.P90 && *lat.P90 <= *lat.P99 && *lat.P99 <= 1) {
		t.Errorf("percentiles %v %v %v, want 0 < p50 <= p90 <= p99 <= 1s (the top bound)", *lat.P50, *lat.P90, *lat.P99)
	}
	// 70 seconds later, with no call since: the last minute has none.
	s.sample(t0.Add(100 * time.Second))
	if _, lat = s.series(60); lat.Calls != 0 || lat.P50 != nil {
		t.Errorf("a minute without calls: %+v, want none", lat)
	}
}

// BenchmarkSample: the cost of one sample (a Gather of every metric,
// Go's runtime included), taken once a second, and of one series of 300
// steps for 20 rules, made per page refresh.
func BenchmarkSample(b *testing.B) {
	m := metrics.New()
	for i := range 20 {
		for _, o := range policy.Outcomes {
			m.Decision("rule-"+string(rune('a'+i)), "k", o)
		}
	}
	s := newSampler(m.Gatherer(), DefaultHistory)
	at := time.Now()
	b.Run("sample", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			at = at.Add(time.Second)
			s.sample(at)
		}
	})
	b.Run("series-300", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.series(DefaultWindow)
		}
	})
}
