package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/bench/internal/section"
	"github.com/sluice-go/sluice/internal/service/loadgen"
)

// TestReportGoals: the goals compare sluice with envoyproxy/ratelimit's
// best setting for each goal (the faster at many callers, the quicker p50
// at one), a baseline that answered nothing says so instead of leaving the
// measure empty, and the section written is one cmd/report reads.
func TestReportGoals(t *testing.T) {
	e := &env{f: flags{out: "results/service.json", callers: 256, keys: 1000,
		duration: 8 * time.Second, duration1: 4 * time.Second, warmup: time.Second, profile: 3 * time.Second}}
	byID := map[string]scenario{}
	for _, sc := range scenarios {
		byID[sc.id] = sc
	}
	// mk is a scenario's two runs: sent decisions in one second at 256
	// callers, and at 1 caller every latency p50.
	mk := func(id string, sent int64, p50 time.Duration) *scenarioResult {
		r := &scenarioResult{sc: byID[id]}
		for _, callers := range []int{256, 1} {
			r.runs = append(r.runs, &runResult{callers: callers, serverCPU: 0.5, redisCPU: 0.25,
				res: &loadgen.Result{Sent: sent, Allowed: sent, Elapsed: time.Second, Latencies: []time.Duration{p50}}})
		}
		return r
	}
	rs := []*scenarioResult{
		mk("empty-grpc", 40000, 50*time.Microsecond),
		mk("sluice-grpc-redis", 30000, 100*time.Microsecond),
		mk("ratelimit-default", 10000, 300*time.Microsecond),
		mk("ratelimit-best", 12000, 400*time.Microsecond),
		mk("empty-http", 0, 0),
		mk("sluice-http-memory", 20000, 80*time.Microsecond),
	}
	sec := report(e, rs, time.Minute)
	goals := map[string]section.Goal{}
	for _, g := range sec.Goals {
		goals[g.Goal] = g
	}
	for _, want := range []section.Goal{
		{Goal: "gRPC ShouldRateLimit at 256 callers: at least 2x envoyproxy/ratelimit's best setting on the same Redis (REDIS_PIPELINE_WINDOW=500us)",
			Measured: "30000 vs 12000 decisions/s: 2.50x", Met: true},
		{Goal: "gRPC ShouldRateLimit at 256 callers (redis store): at least 70% of an empty gRPC server's decisions/s",
			Measured: "30000 vs 40000 decisions/s: 0.75x", Met: true},
		{Goal: "gRPC ShouldRateLimit, 1 caller, on Redis: no slower than envoyproxy/ratelimit (its quicker setting: defaults (REDIS_PIPELINE_WINDOW=0))",
			Measured: "p50 100 µs vs 300 µs; 30000 vs 10000 decisions/s", Met: true},
		{Goal: "HTTP POST /v1/check at 256 caller(s) (memory store): at least 70% of an empty net/http handler's decisions/s",
			Measured: "20000 vs 0 decisions/s: no ratio", Met: false},
	} {
		g, ok := goals[want.Goal]
		if !ok {
			t.Errorf("no goal %q in %+v", want.Goal, sec.Goals)
			continue
		}
		if g.Measured != want.Measured || g.Met != want.Met {
			t.Errorf("goal %q: measured %q, met %v; want %q, %v", want.Goal, g.Measured, g.Met, want.Measured, want.Met)
		}
	}
	if len(sec.Goals) != 5 { // the four above and HTTP at 1 caller
		t.Errorf("%d goals, want 5: %+v", len(sec.Goals), sec.Goals)
	}
	path := filepath.Join(t.TempDir(), "service.json")
	if err := sec.Write(path); err != nil {
		t.Fatal(err)
	}
	back, err := section.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(back.Title, "Service:") || len(back.Tables) != 2 || len(back.Charts) != 4 {
		t.Errorf("read back: title %q, %d tables, %d charts; want Service:…, 2, 4", back.Title, len(back.Tables), len(back.Charts))
	}
}
