package admin

import (
	"maps"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-go/sluice/policy"
)

// The metric families the dashboard reads, from package metrics.
const (
	familyDecisions = "sluice_decisions_total"
	familyStoreTime = "sluice_store_duration_seconds"
	familyStoreErrs = "sluice_store_errors_total"
	familyFallbacks = "sluice_fallbacks_total"
	familySettled   = "sluice_settled_units_total"
	familyShed      = "sluice_shed_total"
)

// The sampler's bounds.
const (
	// DefaultHistory is how many seconds of per-second samples the
	// dashboard keeps (DefaultHistory+1 samples of every series).
	DefaultHistory = 600
	// maxSeries bounds the (rule, outcome) series sampled: a
	// configuration of more rules than this shows the first ones seen.
	maxSeries = 4096
	// latencyWindow is the span the store latency percentiles cover.
	latencyWindow = time.Minute
)

// seriesKey is a sluice_decisions_total series.
type seriesKey struct {
	rule    string
	outcome policy.Outcome
}

// sample is the sampled counters at one time.
type sample struct {
	at        time.Time
	decisions []float64 // by sampler.index; shorter when series appeared later
	buckets   []float64 // cumulative counts of take's latency buckets, by sampler.bounds
	takes     float64   // take's latency count
	errors    float64   // store errors, every op
	fallbacks float64
}

// sampler reads the metrics from a Gatherer once a second into a ring.
type sampler struct {
	g prometheus.Gatherer

	mu     sync.Mutex
	ring   []sample // len DefaultHistory+1, filled from head-n
	head   int      // where the next sample goes
	n      int      // samples held
	index  map[seriesKey]int
	keys   []seriesKey // by index
	bounds []float64   // take's bucket upper bounds, +Inf excluded

	settled map[string]map[string]float64 // rule → kind → units, as last sampled
	shed    map[string]map[string]float64 // rule → class → requests shed, as last sampled
}

func newSampler(g prometheus.Gatherer, history int) *sampler {
	return &sampler{g: g, ring: make([]sample, history+1), index: map[seriesKey]int{}}
}

// outcomeByName maps an outcome label back to the Outcome.
var outcomeByName = func() map[string]policy.Outcome {
	m := make(map[string]policy.Outcome, len(policy.Outcomes))
	for _, o := range policy.Outcomes {
		m[o.String()] = o
	}
	return m
}()

// sample gathers the metrics once and keeps them as the sample of now.
// A Gatherer that fails keeps what it could gather, as /metrics does.
func (s *sampler) sample(now time.Time) {
	fams, _ := s.g.Gather()
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := &s.ring[s.head]
	*slot = sample{at: now, decisions: slot.decisions[:0], buckets: slot.buckets[:0]}
	for _, f := range fams {
		switch f.GetName() {
		case familyDecisions:
			for _, m := range f.GetMetric() {
				k, ok := decisionKey(m)
				if !ok {
					continue
				}
				i, ok := s.index[k]
				if !ok {
					if len(s.keys) >= maxSeries {
						continue
					}
					i = len(s.keys)
					s.index[k] = i
					s.keys = append(s.keys, k)
				}
				for len(slot.decisions) <= i {
					slot.decisions = append(slot.decisions, 0)
				}
				slot.decisions[i] = m.GetCounter().GetValue()
			}
		case familyStoreTime:
			for _, m := range f.GetMetric() {
				if label(m, "op") != "take" {
					continue
				}
				h := m.GetHistogram()
				slot.takes = float64(h.GetSampleCount())
				if s.bounds == nil {
					for _, b := range h.GetBucket() {
						if !math.IsInf(b.GetUpperBound(), 1) {
							s.bounds = append(s.bounds, b.GetUpperBound())
						}
					}
				}
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) {
						slot.buckets = append(slot.buckets, float64(b.GetCumulativeCount()))
					}
				}
			}
		case familyStoreErrs:
			for _, m := range f.GetMetric() {
				slot.errors += m.GetCounter().GetValue()
			}
		case familyFallbacks:
			for _, m := range f.GetMetric() {
				slot.fallbacks += m.GetCounter().GetValue()
			}
		case familySettled:
			for _, m := range f.GetMetric() {
				rule, v := label(m, "rule"), m.GetCounter().GetValue()
				if v == 0 || len(s.settled) >= maxSeries {
					continue
				}
				if s.settled == nil {
					s.settled = map[string]map[string]float64{}
				}
				if s.settled[rule] == nil {
					s.settled[rule] = map[string]float64{}
				}
				s.settled[rule][label(m, "kind")] = v
			}
		case familyShed:
			for _, m := range f.GetMetric() {
				rule, v := label(m, "rule"), m.GetCounter().GetValue()
				if v == 0 || s.shed[rule] == nil && len(s.shed) >= maxSeries {
					continue
				}
				if s.shed == nil {
					s.shed = map[string]map[string]float64{}
				}
				if s.shed[rule] == nil {
					s.shed[rule] = map[string]float64{}
				}
				s.shed[rule][label(m, "class")] = v
			}
		}
	}
	s.head = (s.head + 1) % len(s.ring)
	s.n = min(s.n+1, len(s.ring))
}

func decisionKey(m *dto.Metric) (seriesKey, bool) {
	o, ok := outcomeByName[label(m, "outcome")]
	return seriesKey{label(m, "rule"), o}, ok
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// at returns the i-th sample held, 0 the oldest. Called with s.mu held.
func (s *sampler) at(i int) *sample {
	return &s.ring[(s.head-s.n+i+len(s.ring))%len(s.ring)]
}

// RuleSeries is one rule's decisions per second in Stats.Series.
type RuleSeries struct {
	// Rule is the rule's name (the rule label of sluice_decisions_total).
	Rule string `json:"rule"`
	// PerSecond holds, by outcome name (allowed, denied, shadow_denied,
	// denied_by_other, degraded_allowed, degraded_denied), the rule's
	// decisions per second in each step of the series, oldest first;
	// only the outcomes the rule has had.
	PerSecond map[string][]float64 `json:"per_second"`
	// Window holds, by outcome name, the decisions of the whole series.
	Window map[string]float64 `json:"window"`
	// Total holds, by outcome name, the decisions since the start.
	Total map[string]float64 `json:"total"`
	// Settled holds, for a rule that settles, the units its settles
	// gave back (refunded) and charged beyond the reserve (charged)
	// since the start (sluice_settled_units_total); absent for a rule
	// that has settled nothing.
	Settled map[string]float64 `json:"settled,omitempty"`
	// Shed holds, for a rule that sheds by class, the requests it shed
	// since the start by class (sluice_shed_total: this replica's
	// decisions); absent for a rule that has shed nothing, and a class
	// that has shed nothing is left out.
	Shed map[string]float64 `json:"shed,omitempty"`
}

// Series is the per-second history of Stats.
type Series struct {
	// Start is the time the first step ends; each of the Steps steps
	// lasts StepSeconds, about one.
	Start time.Time `json:"start"`
	// StepSeconds is the mean length of a step.
	StepSeconds float64 `json:"step_seconds"`
	// Steps is how many values each series holds.
	Steps int `json:"steps"`
	// Rules are the rules that have decided anything, by name.
	Rules []RuleSeries `json:"rules"`
	// StoreErrors are the store's failed calls per second.
	StoreErrors []float64 `json:"store_errors"`
	// Degraded are the decisions per second the error policy made
	// because the store failed (sluice_fallbacks_total).
	Degraded []float64 `json:"degraded"`
	// Takes are the store calls per second that decisions made.
	Takes []float64 `json:"takes"`
}

// Latency is the store's take latency over the last minute.
type Latency struct {
	// P50, P90 and P99 are percentiles in seconds, interpolated within
	// the histogram's buckets as Prometheus' histogram_quantile does;
	// null when there were no calls.
	P50 *float64 `json:"p50_seconds"`
	P90 *float64 `json:"p90_seconds"`
	P99 *float64 `json:"p99_seconds"`
	// Calls is the number of calls they are taken over.
	Calls float64 `json:"calls"`
	// WindowSeconds is the span they cover.
	WindowSeconds float64 `json:"window_seconds"`
}

// emptySeries is a Series of no step, whose lists are empty, not nil
// (JSON arrays, not null).
func emptySeries() Series {
	return Series{Rules: []RuleSeries{}, StoreErrors: []float64{}, Degraded: []float64{}, Takes: []float64{}}
}

// series returns the last steps per-second steps (all held when steps is
// larger) and the latency of the last minute.
func (s *sampler) series(steps int) (Series, Latency) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := emptySeries()
	lat := Latency{}
	if s.n < 2 {
		return out, lat
	}
	steps = min(steps, s.n-1)
	first := s.n - 1 - steps // the sample the first step starts at
	out.Steps = steps
	out.Start = s.at(first + 1).at
	out.StepSeconds = s.at(s.n-1).at.Sub(s.at(first).at).Seconds() / float64(steps)
	last := s.at(s.n - 1)
	rate := func(v func(*sample) float64) []float64 {
		r := make([]float64, steps)
		for i := range steps {
			a, b := s.at(first+i), s.at(first+i+1)
			dt := b.at.Sub(a.at).Seconds()
			if d := v(b) - v(a); d > 0 && dt > 0 {
				r[i] = round3(d / dt)
			}
		}
		return r
	}
	byRule := map[string]*RuleSeries{}
	for i, k := range s.keys {
		if i >= len(last.decisions) {
			continue
		}
		rs := byRule[k.rule]
		if rs == nil {
			rs = &RuleSeries{Rule: k.rule, PerSecond: map[string][]float64{}, Window: map[string]float64{}, Total: map[string]float64{}}
			byRule[k.rule] = rs
		}
		name := k.outcome.String()
		get := func(sm *sample) float64 {
			if i < len(sm.decisions) {
				return sm.decisions[i]
			}
			return 0
		}
		rs.PerSecond[name] = rate(get)
		rs.Window[name] = math.Max(0, get(last)-get(s.at(first)))
		rs.Total[name] = get(last)
	}
	for _, rs := range byRule {
		if u := s.settled[rs.Rule]; len(u) > 0 {
			rs.Settled = maps.Clone(u)
		}
		if u := s.shed[rs.Rule]; len(u) > 0 {
			rs.Shed = maps.Clone(u)
		}
		out.Rules = append(out.Rules, *rs)
	}
	sort.Slice(out.Rules, func(i, j int) bool { return out.Rules[i].Rule < out.Rules[j].Rule })
	out.StoreErrors = rate(func(sm *sample) float64 { return sm.errors })
	out.Degraded = rate(func(sm *sample) float64 { return sm.fallbacks })
	out.Takes = rate(func(sm *sample) float64 { return sm.takes })

	// The latency: the buckets of the last minute, from the differences
	// of the cumulative counts.
	from := s.n - 1
	for from > 0 && last.at.Sub(s.at(from-1).at) <= latencyWindow {
		from--
	}
	old := s.at(from)
	lat.WindowSeconds = round3(last.at.Sub(old.at).Seconds())
	lat.Calls = last.takes - old.takes
	if lat.Calls > 0 && len(last.buckets) == len(s.bounds) {
		counts := make([]float64, len(s.bounds))
		for i := range counts {
			counts[i] = last.buckets[i]
			if i < len(old.buckets) {
				counts[i] -= old.buckets[i]
			}
		}
		for q, p := range map[float64]**float64{0.5: &lat.P50, 0.9: &lat.P90, 0.99: &lat.P99} {
			if v := quantile(q, s.bounds, counts, lat.Calls); !math.IsNaN(v) {
				v = math.Round(v*1e9) / 1e9 // to the nanosecond
				*p = &v
			}
		}
	}
	return out, lat
}

// quantile returns the q-quantile (0 <= q <= 1) of a histogram of
// cumulative bucket counts counts with finite upper bounds bounds and
// total observations total (the +Inf bucket's count), as Prometheus'
// histogram_quantile computes it: linear interpolation within the bucket
// that holds the rank q × total, the first bucket starting at 0 (when its
// bound is positive), and the highest finite bound for a rank in the +Inf
// bucket. It is NaN when there are no observations.
func quantile(q float64, bounds, counts []float64, total float64) float64 {
	if total <= 0 || math.IsNaN(q) || len(bounds) != len(counts) {
		return math.NaN()
	}
	if q < 0 {
		return math.Inf(-1)
	}
	if q > 1 {
		return math.Inf(1)
	}
	rank := q * total
	b := sort.Search(len(counts), func(i int) bool { return counts[i] >= rank })
	if b == len(counts) {
		// In the +Inf bucket: the highest finite bound.
		if len(bounds) == 0 {
			return math.NaN()
		}
		return bounds[len(bounds)-1]
	}
	lower, below := 0.0, 0.0
	if b > 0 {
		lower, below = bounds[b-1], counts[b-1]
	} else if bounds[0] <= 0 {
		return bounds[0]
	}
	in := counts[b] - below
	if in <= 0 {
		return bounds[b]
	}
	return lower + (bounds[b]-lower)*((rank-below)/in)
}

// round3 rounds v to three decimals, for a compact JSON.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
