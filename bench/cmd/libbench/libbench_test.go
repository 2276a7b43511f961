//go:build integration

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/bench/internal/section"
	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// TestMain lets the test binary be the heap-per-key child that run
// starts (os.Executable is the test binary here).
func TestMain(m *testing.M) {
	heapChild()
	os.Exit(m.Run())
}

func TestParseMicro(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]map[string][]float64
		wantErr string
	}{
		{
			name: "results, headers and medians",
			in: "goos: linux\ncpu: X\n" +
				"BenchmarkMemory/sluice-gcra/serial-2   \t 1000\t 120.5 ns/op\t 0 B/op\t 0 allocs/op\n" +
				"BenchmarkMemory/sluice-gcra/serial-2   \t 1000\t 130.5 ns/op\t 0 B/op\t 0 allocs/op\n" +
				"BenchmarkRedis/redis_rate/parallel-16 \t 10\t 32000 ns/op\t 752 B/op\t 22 allocs/op\nPASS\nok x 1s\n",
			want: map[string]map[string][]float64{
				"Memory/sluice-gcra/serial": {"ns/op": {120.5, 130.5}, "B/op": {0, 0}, "allocs/op": {0, 0}},
				"Redis/redis_rate/parallel": {"ns/op": {32000}, "B/op": {752}, "allocs/op": {22}},
			},
		},
		{name: "a unit without a value", in: "BenchmarkX-2 10 12 ns/op allocs/op\n", wantErr: "line 1"},
		{name: "iterations not a number", in: "BenchmarkX-2 ten 12 ns/op\n", wantErr: "iterations"},
		{name: "value not a number", in: "BenchmarkX-2 10 fast ns/op\n", wantErr: "value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMicro(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d benchmarks %v, want %d", len(got), got, len(tt.want))
			}
			for name, units := range tt.want {
				for unit, vs := range units {
					if g := got[name][unit]; len(g) != len(vs) || (len(g) > 0 && g[0] != vs[0]) {
						t.Errorf("%s %s = %v, want %v", name, unit, g, vs)
					}
				}
			}
			if v, ok := got.get("Memory/sluice-gcra/serial", "ns/op"); tt.want["Memory/sluice-gcra/serial"] != nil && (!ok || v != 125.5) {
				t.Errorf("median ns/op = %v, %v; want 125.5", v, ok)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestProcCPU(t *testing.T) {
	u0, s0, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); { // burn CPU
	}
	u1, s1, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u1+s1 <= u0+s0 || u1 < u0 || s1 < s0 {
		t.Errorf("CPU time (user, system) went from %v, %v to %v, %v over 100ms of spinning", u0, s0, u1, s1)
	}
	if _, _, err := procCPU(-1); err == nil {
		t.Error("procCPU(-1) did not fail")
	}
}

func TestConfigCheck(t *testing.T) {
	ok := config{out: "x.json", rounds: 1, callers: 1, d256: time.Second, d1: time.Second, dAbuse: time.Second, heapKeys: 1000, timeout: time.Minute}
	if err := ok.check(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*config)
		want string
	}{
		{"no out", func(c *config) { c.out = "" }, "-out"},
		{"no rounds", func(c *config) { c.rounds = 0 }, "-rounds"},
		{"too many callers", func(c *config) { c.callers = 5000 }, "-callers"},
		{"short run", func(c *config) { c.d256 = time.Millisecond }, "-concurrent"},
		{"long serial", func(c *config) { c.d1 = time.Hour }, "-serial"},
		{"no abusive", func(c *config) { c.dAbuse = 0 }, "-abusive"},
		{"few keys", func(c *config) { c.heapKeys = 10 }, "-heap-keys"},
		{"no timeout", func(c *config) { c.timeout = 0 }, "-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			if err := c.check(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// TestRun runs the whole harness briefly against a real redis-server and
// checks the section it writes: every goal of the library side, sluice's
// exact admission of the abusive key, and the memory-store goals judged
// from a micro-benchmark file.
func TestRun(t *testing.T) {
	redistest.Need(t)
	dir := t.TempDir()
	microFile := filepath.Join(dir, "micro.txt")
	// sluice gcra within 1.5× of x/time/rate with 0 allocs, token_bucket
	// not; 1M keys scaling 2×.
	micro := "BenchmarkMemoryOneKey/x-time-rate/serial-2 100 100 ns/op 0 B/op 0 allocs/op\n" +
		"BenchmarkMemoryOneKey/sluice-gcra/serial-2 100 140 ns/op 0 B/op 0 allocs/op\n" +
		"BenchmarkMemoryOneKey/sluice-token_bucket/serial-2 100 300 ns/op 48 B/op 1 allocs/op\n" +
		"BenchmarkMemory1M/sluice-gcra/serial-2 100 400 ns/op 0 B/op 0 allocs/op\n" +
		"BenchmarkMemory1M/sluice-gcra/parallel-2 100 200 ns/op 0 B/op 0 allocs/op\n"
	if err := os.WriteFile(microFile, []byte(micro), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "library.json")
	c := config{out: out, micro: microFile, microCmd: "go test (fake)", rounds: 1, callers: 16,
		d256: 50 * time.Millisecond, d1: 50 * time.Millisecond, dAbuse: 100 * time.Millisecond, heapKeys: 2000, timeout: 2 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if err := run(ctx, c); err != nil {
		t.Fatal(err)
	}
	sec, err := section.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	goals := map[string]section.Goal{}
	for _, g := range sec.Goals {
		for _, p := range goalOrder {
			if strings.HasPrefix(g.Goal, p) {
				count[p]++
			}
		}
		goals[g.Goal] = g
		if !g.Met && g.Limit == "" {
			t.Errorf("goal %q is not met and says nothing of what limits it", g.Goal)
		}
	}
	want := map[string]int{"Redis CPU": 5, "decisions/s": 5, "one caller": 5, "settle Redis CPU": 2, "reserve+settle": 2, "acquire+release": 1, "Redis memory": 5, "deny cache": 1, "memory store": 4}
	for p, n := range want {
		if count[p] != n {
			t.Errorf("%d goals starting %q, want %d", count[p], p, n)
		}
	}
	if g := goals["deny cache: one abusive key, 16 callers"]; !strings.Contains(g.Measured, "admitted 100 ") {
		t.Errorf("deny cache goal measured %q, want sluice admitting exactly 100", g.Measured)
	}
	if g := goals["memory store, one key, gcra"]; !g.Met || !strings.Contains(g.Measured, "1.40×") {
		t.Errorf("gcra one-key goal %+v: want met at 1.40×", g)
	}
	if g := goals["memory store, one key, token_bucket"]; g.Met || g.Limit == "" {
		t.Errorf("token_bucket one-key goal %+v: want not met (3× and 1 alloc), with a limit", g)
	}
	if g := goals["memory store: parallel throughput over 1M keys"]; !g.Met || !strings.Contains(g.Measured, "2.00×") {
		t.Errorf("1M keys goal %+v: want met at 2.00×", g)
	}
	var concurrent *section.Table
	for i := range sec.Tables {
		if strings.HasPrefix(sec.Tables[i].Caption, "Redis store, 16 callers") {
			concurrent = &sec.Tables[i]
		}
	}
	if concurrent == nil || len(concurrent.Rows) != len(redisImpls()) {
		t.Fatalf("no concurrent table with a row per implementation: %+v", concurrent)
	}
	for _, r := range concurrent.Rows {
		if r[1] == "0/s" {
			t.Errorf("%s decided nothing", r[0])
		}
	}
	for _, a := range settleAlgorithms {
		for _, g := range []string{"settle Redis CPU, " + string(a) + ", 16 callers", "reserve+settle time per call, " + string(a) + ", 16 callers"} {
			if _, ok := goals[g]; !ok {
				t.Errorf("no goal %q", g)
			}
		}
	}
	var settled *section.Table
	for i := range sec.Tables {
		if strings.HasPrefix(sec.Tables[i].Caption, "Reserve and settle") {
			settled = &sec.Tables[i]
		}
	}
	if settled == nil || len(settled.Rows) != 2*len(settleAlgorithms) {
		t.Fatalf("no reserve-and-settle table with two rows per algorithm: %+v", settled)
	}
	for _, r := range settled.Rows {
		if r[2] == "0/s" || r[3] == "0/s" {
			t.Errorf("%s at %s callers: %s decisions, %s reserve+settle pairs per second", r[0], r[1], r[2], r[3])
		}
	}
	if _, ok := goals["acquire+release Redis CPU, 16 callers"]; !ok {
		t.Error("no goal \"acquire+release Redis CPU, 16 callers\"")
	}
	var slots *section.Table
	for i := range sec.Tables {
		if strings.HasPrefix(sec.Tables[i].Caption, "Acquire and release") {
			slots = &sec.Tables[i]
		}
	}
	if slots == nil || len(slots.Rows) != 2 || slots.Rows[0][0] != "16" || slots.Rows[1][0] != "1" {
		t.Fatalf("no acquire-and-release table with a row at 16 callers and one at 1: %+v", slots)
	}
	for _, r := range slots.Rows {
		if r[1] == "0/s" || r[2] == "0/s" {
			t.Errorf("at %s callers: %s decisions, %s acquire+release pairs per second", r[0], r[1], r[2])
		}
	}
	if len(sec.Charts) < 5 {
		t.Errorf("%d charts, want at least 5", len(sec.Charts))
	}
}

func TestParseTop(t *testing.T) {
	out := `File: bench.test
Type: cpu
Showing nodes accounting for 1.20s, 92.31% of 1.30s total
      flat  flat%   sum%        cum   cum%
     0.50s 38.46% 38.46%      0.50s 38.46%  runtime.mallocgc
     0.30s 23.08% 61.54%      0.90s 69.23%  github.com/sluice-go/sluice/store/memory.(*Store).Take
     0.20s 15.38% 76.92%      0.20s 15.38%  runtime.memequal (inline)
`
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{out, 2, "runtime.mallocgc 38.46%, github.com/sluice-go/sluice/store/memory.(*Store).Take 23.08%"},
		{out, 5, "runtime.mallocgc 38.46%, github.com/sluice-go/sluice/store/memory.(*Store).Take 23.08%, runtime.memequal (inline) 15.38%"},
		{"File: x\nType: cpu\n", 3, "no samples"},
	}
	for _, tt := range tests {
		if got := parseTop(tt.in, tt.n); got != tt.want {
			t.Errorf("parseTop(n=%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestOrderGoals(t *testing.T) {
	goals := []section.Goal{{Goal: "memory store x"}, {Goal: "acquire+release"}, {Goal: "reserve+settle gcra"}, {Goal: "Redis memory a"}, {Goal: "settle Redis CPU gcra"}, {Goal: "Redis CPU gcra"}, {Goal: "Redis memory b"}, {Goal: "other"}, {Goal: "decisions/s gcra"}}
	orderGoals(goals)
	var got []string
	for _, g := range goals {
		got = append(got, g.Goal)
	}
	want := "Redis CPU gcra|decisions/s gcra|settle Redis CPU gcra|reserve+settle gcra|acquire+release|Redis memory a|Redis memory b|memory store x|other"
	if strings.Join(got, "|") != want {
		t.Errorf("order %v, want %s", got, want)
	}
}

// TestSettleGoals judges the two goals of reserve and settle from made-up
// rounds of a decision and of its reserve+settle: the settle's Redis CPU
// is the pair's minus the decision's, and both goals take the median of
// each round's ratio.
func TestSettleGoals(t *testing.T) {
	// round is a sample of a concurrent run (calls/s, Redis µs per call)
	// and of a one-caller run.
	round := func(rate, cpu, rate1, cpu1 float64) sample {
		return sample{rate: rate, redisCPU: cpu, scriptCalls: 0.5, rate1: rate1, redisCPU1: cpu1, scriptCalls1: 1}
	}
	dec := &stats{impl: impl{name: "sluice gcra", algo: sluice.GCRA},
		samples: []sample{round(100e3, 4, 10e3, 20), round(80e3, 5, 10e3, 20), round(120e3, 4, 10e3, 20)}}
	tests := []struct {
		name                    string
		pair                    []sample
		cpuMet, timeMet         bool
		cpuMeasured, tmMeasured string // in the goals' Measured
	}{
		{
			name:   "within both",
			pair:   []sample{round(50e3, 7, 6e3, 36), round(40e3, 9, 6e3, 36), round(60e3, 6, 6e3, 36)},
			cpuMet: true, timeMet: true,
			cpuMeasured: "settle 3.00 µs vs decision 4.00 µs (median ratio over 3 rounds 0.75×); reserve+settle 7.00 µs per call; 1 caller: settle 16.0 µs vs decision 20.0 µs (0.80×)",
			tmMeasured:  "20.0 µs per call (50.0k/s) vs decision 10.0 µs (100.0k/s): median ratio over 3 rounds 2.00×",
		},
		{
			name:   "a settle that costs a decision, at the bound",
			pair:   []sample{round(50e3, 8, 6e3, 40), round(40e3, 10, 6e3, 40), round(60e3, 8, 6e3, 40)},
			cpuMet: true, timeMet: true,
			cpuMeasured: "median ratio over 3 rounds 1.00×",
			tmMeasured:  "median ratio over 3 rounds 2.00×",
		},
		{
			name:        "neither",
			pair:        []sample{round(40e3, 10, 6e3, 36), round(30e3, 12, 6e3, 36), round(50e3, 9, 6e3, 36)},
			cpuMeasured: "settle 6.00 µs vs decision 4.00 µs (median ratio over 3 rounds 1.40×)",
			tmMeasured:  "median ratio over 3 rounds 2.50×",
		},
		{
			name:   "one stalled round does not decide",
			pair:   []sample{round(50e3, 7, 6e3, 36), round(10e3, 30, 1e3, 200), round(60e3, 6, 6e3, 36)},
			cpuMet: true, timeMet: true,
			cpuMeasured: "median ratio over 3 rounds 0.75×",
			tmMeasured:  "median ratio over 3 rounds 2.00×",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pair := &stats{impl: impl{name: settleName(sluice.GCRA), algo: sluice.GCRA, settle: true}, samples: tt.pair}
			gs := newSettleCost(pair, dec, 256).goals()
			if len(gs) != 2 {
				t.Fatalf("%d goals, want 2", len(gs))
			}
			cpu, tm := gs[0], gs[1]
			for _, c := range []struct {
				g              section.Goal
				name, measured string
				met            bool
			}{
				{cpu, "settle Redis CPU, gcra, 256 callers", tt.cpuMeasured, tt.cpuMet},
				{tm, "reserve+settle time per call, gcra, 256 callers", tt.tmMeasured, tt.timeMet},
			} {
				if c.g.Goal != c.name {
					t.Errorf("goal %q, want %q", c.g.Goal, c.name)
				}
				if c.g.Met != c.met || (c.g.Limit == "") != c.met {
					t.Errorf("%s: met %v, limit %q; want met %v, and a limit when not met", c.name, c.g.Met, c.g.Limit, c.met)
				}
				if !strings.Contains(c.g.Measured, c.measured) {
					t.Errorf("%s: measured %q, want it to contain %q", c.name, c.g.Measured, c.measured)
				}
			}
		})
	}
}

// TestSlotGoal judges the goal of a slot's acquire and release from
// made-up rounds of a decision and of the pair: the pair's Redis CPU over
// the decision's, the median of each round's ratio, at most 2.2.
func TestSlotGoal(t *testing.T) {
	round := func(rate, cpu, rate1, cpu1 float64) sample {
		return sample{rate: rate, redisCPU: cpu, scriptCalls: 0.5, rate1: rate1, redisCPU1: cpu1, scriptCalls1: 1}
	}
	dec := &stats{impl: impl{name: "sluice gcra", algo: sluice.GCRA},
		samples: []sample{round(100e3, 4, 10e3, 20), round(80e3, 5, 10e3, 20), round(120e3, 4, 10e3, 20)}}
	tests := []struct {
		name     string
		pair     []sample
		met      bool
		measured string
	}{
		{"within", []sample{round(50e3, 8, 6e3, 36), round(40e3, 9, 6e3, 36), round(60e3, 7, 6e3, 36)}, true,
			"8.00 µs vs decision 4.00 µs (median ratio over 3 rounds 1.80×); time per call 20.0 µs vs 10.0 µs (2.00×); 1 caller: 36.0 µs vs 20.0 µs (1.80×)"},
		{"at the bound", []sample{round(50e3, 8.8, 6e3, 36), round(40e3, 11, 6e3, 36), round(60e3, 8.8, 6e3, 36)}, true, "median ratio over 3 rounds 2.20×"},
		{"above", []sample{round(50e3, 12, 6e3, 36), round(40e3, 14, 6e3, 36), round(60e3, 11, 6e3, 36)}, false, "median ratio over 3 rounds 2.80×"},
		{"one stalled round does not decide", []sample{round(50e3, 8, 6e3, 36), round(10e3, 40, 1e3, 200), round(60e3, 7, 6e3, 36)}, true, "median ratio over 3 rounds 2.00×"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pair := &stats{impl: impl{name: slotName, algo: sluice.Concurrency, slot: true}, samples: tt.pair}
			g := slotGoal(newSettleCost(pair, dec, 256))
			if g.Goal != "acquire+release Redis CPU, 256 callers" {
				t.Errorf("goal %q", g.Goal)
			}
			if g.Met != tt.met || (g.Limit == "") != tt.met {
				t.Errorf("met %v, limit %q; want met %v, and a limit when not met", g.Met, g.Limit, tt.met)
			}
			if !strings.Contains(g.Measured, tt.measured) {
				t.Errorf("measured %q, want it to contain %q", g.Measured, tt.measured)
			}
		})
	}
}

func TestShellJoin(t *testing.T) {
	if got := shellJoin([]string{"-out", "results/x.json", "-micro-cmd", "go test -run '^$'"}); got != `-out results/x.json -micro-cmd 'go test -run '\''^$'\'''` {
		t.Errorf("shellJoin = %s", got)
	}
}

// TestLoad runs the load loop over a decision function that admits every
// other key and fails on one, and checks its counts and its stop.
func TestLoad(t *testing.T) {
	ks := []string{"a", "b", "c", "d"}
	tests := []struct {
		name    string
		allow   allowFunc
		callers int
		wantErr bool
	}{
		{"admits a and c", func(_ context.Context, k string) (bool, error) { return k == "a" || k == "c", nil }, 8, false},
		{"one caller", func(_ context.Context, k string) (bool, error) { return true, nil }, 1, false},
		{"fails on d", func(_ context.Context, k string) (bool, error) {
			if k == "d" {
				return false, errors.New("boom")
			}
			return true, nil
		}, 4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Now()
			r := load(context.Background(), tt.allow, ks, tt.callers, 50*time.Millisecond)
			if took := time.Since(t0); took > 30*time.Second {
				t.Errorf("a 50ms load took %v", took)
			}
			if r.decisions != r.admitted+r.denied+r.errors || r.decisions == 0 {
				t.Errorf("decisions %d, admitted %d, denied %d, errors %d", r.decisions, r.admitted, r.denied, r.errors)
			}
			if got := int64(len(r.lat)); got > r.decisions || got == 0 {
				t.Errorf("%d latencies of %d decisions", got, r.decisions)
			}
			if tt.wantErr {
				if r.firstErr == nil || r.errors == 0 {
					t.Errorf("no error recorded: %+v", r.firstErr)
				}
				return
			}
			if r.firstErr != nil {
				t.Errorf("error %v", r.firstErr)
			}
			if tt.callers > 1 && (r.admitted == 0 || r.denied == 0) {
				t.Errorf("admitted %d, denied %d: want both", r.admitted, r.denied)
			}
			if q50, q99 := r.quantile(0.5), r.quantile(0.99); q50 > q99 {
				t.Errorf("p50 %v above p99 %v", q50, q99)
			}
		})
	}
}
