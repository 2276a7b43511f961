//go:build e2e

package deploy_test

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// metricNames are the series sluice serve exposes at /metrics that the
// alert rules and the dashboard may use, with their kind: a histogram is
// read through its _bucket, _count and _sum series.
var metricNames = map[string]string{
	"sluice_decisions_total":            "counter",   // {rule, outcome}
	"sluice_decision_duration_seconds":  "histogram", // {door}
	"sluice_store_duration_seconds":     "histogram", // {op}
	"sluice_store_errors_total":         "counter",   // {op}
	"sluice_fallbacks_total":            "counter",
	"sluice_config_reloads_total":       "counter", // {result}
	"sluice_breaker_open":               "gauge",
	"sluice_breaker_opens_total":        "counter",
	"sluice_memory_keys":                "gauge",
	"sluice_memory_capacity":            "gauge",
	"sluice_memory_evictions_total":     "counter",
	"sluice_envoy_unknown_domain_total": "counter",
	"sluice_settled_units_total":        "counter", // {rule, kind}
	"sluice_slots_held":                 "gauge",   // {rule}
}

// labelValues are the values the alerts and the dashboard may match each
// label against.
var labelValues = map[string][]string{
	"outcome": {"allowed", "denied", "denied_by_other", "shadow_denied", "degraded_allowed", "degraded_denied", "shed"},
	"door":    {"http", "grpc", "json", "proxy"},
	"op":      {"take", "reset", "peek", "refund", "charge", "renew"},
	"result":  {"ok", "rejected"},
	"kind":    {"refunded", "charged"},
}

// Standard series of the Prometheus client and of Prometheus itself.
var standardMetric = regexp.MustCompile(`^(up|process_[a-z_]+|go_[a-z_]+)$`)

// promqlWords are PromQL's functions, aggregations and keywords: the
// identifiers of an expression that are not metric names.
var promqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`sum min max avg count stddev stdvar topk bottomk quantile count_values group
		by without on ignoring group_left group_right and or unless bool offset
		rate irate increase delta idelta deriv resets changes histogram_quantile abs ceil floor round clamp clamp_min clamp_max
		absent absent_over_time avg_over_time min_over_time max_over_time sum_over_time count_over_time last_over_time
		label_replace label_join label_values vector scalar time timestamp sort sort_desc exp ln log2 log10 sqrt predict_linear
		inf nan`) {
		promqlWords[w] = true
	}
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promDuration = regexp.MustCompile(`^\d+[smhdwy]$`)
	promLabel    = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

// metricsOf returns the metric names expr reads, and fails t for a label
// value outside labelValues.
func metricsOf(t *testing.T, where, expr string) []string {
	t.Helper()
	for _, m := range promLabel.FindAllStringSubmatch(expr, -1) {
		values, ok := labelValues[m[1]]
		if !ok || strings.Contains(m[3], "$") {
			continue
		}
		for _, v := range strings.Split(strings.Trim(m[3], "^$()"), "|") {
			if !slices.Contains(values, v) {
				t.Errorf("%s: %s%s%q: %q is none of the %s values sluice reports (%s)", where, m[1], m[2], m[3], v, m[1], strings.Join(values, ", "))
			}
		}
	}
	s := promMatchers.ReplaceAllString(expr, " ")
	s = promString.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\$\{?[A-Za-z_]+\}?`).ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		w := s[loc[0]:loc[1]]
		// A number's exponent or a duration is not a name.
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') || promDuration.MatchString(w) || promqlWords[w] {
			continue
		}
		out = append(out, w)
	}
	return out
}

// checkMetric fails t unless name is a series sluice serves.
func checkMetric(t *testing.T, where, name string) {
	t.Helper()
	if standardMetric.MatchString(name) {
		return
	}
	base := name
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if b, ok := strings.CutSuffix(name, suffix); ok && metricNames[b] == "histogram" {
			base = b
		}
	}
	if _, ok := metricNames[base]; !ok {
		t.Errorf("%s reads %s, which sluice does not serve", where, name)
	}
	if metricNames[base] == "histogram" && base == name {
		t.Errorf("%s reads histogram %s without _bucket, _count or _sum", where, name)
	}
}

// TestMetricsOf: the name extraction finds the names and only them.
func TestMetricsOf(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up{job="sluice"} == 0`, []string{"up"}},
		{`sum by (job, rule) (rate(sluice_decisions_total{outcome="denied"}[5m] offset 5m)) > 3 * 1e-3`, []string{"sluice_decisions_total"}},
		{`histogram_quantile(0.99, sum by (door, le) (rate(sluice_decision_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))`, []string{"sluice_decision_duration_seconds_bucket"}},
		{`max by (instance) (sluice_memory_keys / sluice_memory_capacity) > 0.9 or go_goroutines`, []string{"sluice_memory_keys", "sluice_memory_capacity", "go_goroutines"}},
		{`sluice_made_up_total{op="take"}`, []string{"sluice_made_up_total"}},
	} {
		if got := metricsOf(t, "test", c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricsOf(%s) = %q, want %q", c.expr, got, c.want)
		}
	}
}

// alertRules is deploy/prometheus/alerts.yaml.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertRules: promtool accepts alerts.yaml and its unit tests
// (alerts_test.yaml) pass; every alert the issue names is there, waits a
// for: before firing, has a severity and a summary and description, and
// reads only series sluice serves, with label values it reports.
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			have[r.Alert] = true
			where := "alert " + r.Alert
			if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
				t.Errorf("%s: for: %q, want a positive duration", where, r.For)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", where, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want summary and description annotations", where)
			}
			names := metricsOf(t, where, r.Expr)
			if len(names) == 0 {
				t.Errorf("%s reads no series: %s", where, r.Expr)
			}
			for _, n := range names {
				checkMetric(t, where, n)
			}
		}
	}
	for _, a := range []string{"SluiceDown", "SluiceBreakerOpen", "SluiceStoreErrors", "SluiceDegradedDecisions",
		"SluiceConfigReloadRejected", "SluiceDenyRatioSpike", "SluiceDecisionLatencyHigh", "SluiceMemoryStoreNearCapacity"} {
		if !have[a] {
			t.Errorf("alerts.yaml lacks %s", a)
		}
	}

	promtool := need(t, "promtool", "prometheus")
	run(t, time.Minute, promtool, "check", "rules", "prometheus/alerts.yaml")
	out := run(t, 2*time.Minute, promtool, "test", "rules", "prometheus/alerts_test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct {
		W int `json:"w"`
		H int `json:"h"`
	} `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// TestGrafanaDashboard: deploy/grafana/sluice.json parses, each panel has
// a unique id, a place and (but rows) a query on the dashboard's data
// source variable, every query reads only series sluice serves, and every
// sluice series is shown somewhere.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana/sluice.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana/sluice.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q, uid %q: want both", d.Title, d.UID)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if q, ok := v.Query.(map[string]any); ok {
			s, _ := q["query"].(string)
			// label_values(<series>, <label>): the label is no series.
			if m := regexp.MustCompile(`^label_values\((.*),\s*[a-z_]+\)$`).FindStringSubmatch(s); m != nil {
				s = m[1]
			}
			for _, n := range metricsOf(t, "variable "+v.Name, s) {
				checkMetric(t, "variable "+v.Name, n)
			}
		}
	}
	if !vars["datasource"] {
		t.Error("no datasource variable: the dashboard would be bound to one data source's uid")
	}
	shown := map[string]bool{}
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			where := "panel " + p.Title
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("%s: id %d missing or used twice", where, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("%s has no gridPos", where)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: datasource %v, want the ${datasource} variable", where, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s has no query", where)
			}
			for _, tg := range p.Targets {
				names := metricsOf(t, where, tg.Expr)
				if len(names) == 0 {
					t.Errorf("%s: query reads no series: %s", where, tg.Expr)
				}
				for _, n := range names {
					checkMetric(t, where, n)
					shown[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")] = true
				}
			}
		}
	}
	walk(d.Panels)
	for n := range metricNames {
		if !shown[n] {
			t.Errorf("no panel shows %s", n)
		}
	}
}

// TestMetricNamesServed: the series the alerts and the dashboard read
// are the ones sluice serve's /metrics has from its first scrape, of the
// same kind, with the label values they match against; and every sluice
// series and label value it serves is among them (a new one would go
// unwatched). Its rule labels are the ConfigMap's rules.
func TestMetricNamesServed(t *testing.T) {
	p := loadKube(t).sluicePod(t)
	vol := newConfigMapVolume(t, p.cm.Data)
	env, httpAddr, _ := p.podEnv(t, vol.dir)
	base := "http://" + httpAddr
	startSluice(t, p.c.Args, env, base+"/healthz")
	base = "http://" + env["SLUICE_LISTEN"] // moved if taken
	code, body := get(base + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	served := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (sluice_[a-z_]+) ([a-z]+)$`).FindAllStringSubmatch(body, -1) {
		served[m[1]] = m[2]
	}
	for name, kind := range served {
		if metricNames[name] != kind {
			t.Errorf("/metrics serves %s %s; metricNames has it as %q", kind, name, metricNames[name])
		}
	}
	for name := range metricNames {
		if _, ok := served[name]; !ok {
			t.Errorf("/metrics does not serve %s, which the alerts and the dashboard read", name)
		}
	}

	values := map[string]map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^sluice_[a-z_]+\{([^}]*)\}`).FindAllStringSubmatch(body, -1) {
		for _, l := range promLabel.FindAllStringSubmatch(m[1], -1) {
			if values[l[1]] == nil {
				values[l[1]] = map[string]bool{}
			}
			values[l[1]][l[3]] = true
		}
	}
	want := map[string][]string{"rule": p.ruleNames(t)}
	for label, vs := range labelValues {
		want[label] = vs
	}
	for label, vs := range want {
		got := make([]string, 0, len(values[label]))
		for v := range values[label] {
			got = append(got, v)
		}
		slices.Sort(got)
		vs = slices.Sorted(slices.Values(vs))
		if !slices.Equal(got, vs) {
			t.Errorf("/metrics labels %s with %q, want %q", label, got, vs)
		}
	}
	for label := range values {
		if _, ok := want[label]; !ok && label != "le" {
			t.Errorf("/metrics has a label %s the test does not know", label)
		}
	}
}
