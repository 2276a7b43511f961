package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/bench/internal/section"
)

// report makes the results of the scenarios' runs.
func report(e *env, rs []*scenarioResult, took time.Duration) *section.Section {
	out := &section.Section{
		Title:   "Service: sluice serve beside envoyproxy/ratelimit, gubernator and empty servers",
		Command: "cd bench && go run ./cmd/servicebench -out " + e.f.out + flagsNote(e.f),
		Notes:   notes(e, took),
	}
	by := map[string]*scenarioResult{}
	for _, r := range rs {
		by[r.sc.id] = r
	}
	for _, door := range []struct{ door, caption string }{
		{"grpc", "gRPC ShouldRateLimit, 1 descriptor"},
		{"http", "HTTP POST /v1/check, 1 check"},
	} {
		t := section.Table{
			Caption: fmt.Sprintf("%s, %d keys, every call admitted, %d callers and 1", door.caption, e.f.keys, e.f.callers),
			Header:  []string{"server", "store", "setting", "callers", "decisions/s", "p50", "p99", "server CPU µs/decision", "Redis CPU µs/decision"},
		}
		for _, callers := range []int{e.f.callers, 1} {
			c := section.Chart{
				Name:  fmt.Sprintf("service-%s-%d", door.door, callers),
				Title: fmt.Sprintf("%s, %d caller%s", door.caption, callers, map[bool]string{true: "", false: "s"}[callers == 1]),
				Unit:  "decisions/s",
			}
			for _, r := range rs {
				if r.sc.door != door.door {
					continue
				}
				run := r.run(callers)
				if run == nil {
					continue
				}
				redis := "-"
				if r.sc.store == "redis" {
					redis = fmt.Sprintf("%.1f", perDecision(run.redisCPU, run.res))
				}
				t.Rows = append(t.Rows, []string{r.sc.title, r.sc.store, r.sc.setting, strconv.Itoa(callers),
					fmt.Sprintf("%.0f", run.res.PerSecond()), us(run.res.Quantile(0.5)), us(run.res.Quantile(0.99)),
					fmt.Sprintf("%.1f", perDecision(run.serverCPU, run.res)), redis})
				label := r.sc.title
				if r.sc.id == "ratelimit-best" {
					label += ", " + r.sc.setting
				}
				c.Bars = append(c.Bars, section.Bar{Label: label, Value: round1(run.res.PerSecond())})
			}
			if len(c.Bars) > 0 {
				out.Charts = append(out.Charts, c)
			}
		}
		if len(t.Rows) > 0 {
			out.Tables = append(out.Tables, t)
		}
	}
	prof := section.Table{
		Caption: "Where sluice serve's CPU goes (pprof CPU profile of the server process, by package), while driven at each number of callers",
		Header:  []string{"server", "callers", "share of the server's CPU"},
	}
	for _, r := range rs {
		for _, run := range r.runs {
			switch {
			case run.profile != nil:
				prof.Rows = append(prof.Rows, []string{r.sc.title, strconv.Itoa(run.callers), sharesText(run.profile)})
			case run.profileErr != nil:
				prof.Rows = append(prof.Rows, []string{r.sc.title, strconv.Itoa(run.callers), "no profile: " + run.profileErr.Error()})
			}
		}
	}
	if len(prof.Rows) > 0 {
		out.Tables = append(out.Tables, prof)
	}
	out.Goals = goals(e, by)
	return out
}

// goals judges the service goals on the runs there are.
func goals(e *env, by map[string]*scenarioResult) []section.Goal {
	var gs []section.Goal
	many := e.f.callers
	get := func(id string, callers int) *runResult {
		if r := by[id]; r != nil {
			return r.run(callers)
		}
		return nil
	}
	// The peer's best setting: its faster at many callers; at one
	// caller, its lower p50.
	bestRL := func(callers int, better func(a, b *runResult) bool) (*runResult, string) {
		var best *runResult
		setting := ""
		for _, id := range []string{"ratelimit-default", "ratelimit-best"} {
			if r := get(id, callers); r != nil && (best == nil || better(r, best)) {
				best, setting = r, by[id].sc.setting
			}
		}
		return best, setting
	}
	faster := func(a, b *runResult) bool { return a.res.PerSecond() > b.res.PerSecond() }
	quicker := func(a, b *runResult) bool { return a.res.Quantile(0.5) < b.res.Quantile(0.5) }
	limitOf := func(id string, callers int) string {
		r := get(id, callers)
		if r == nil {
			return ""
		}
		s := ""
		switch {
		case r.profile != nil:
			s = fmt.Sprintf("profile of %s at %d caller(s): %s", by[id].sc.title, callers, sharesText(r.profile))
		case r.profileErr != nil:
			s = "no profile: " + r.profileErr.Error()
		}
		s += fmt.Sprintf("; the server used %.2f cores", r.serverCPU/r.res.Elapsed.Seconds())
		if by[id].sc.store == "redis" {
			s += fmt.Sprintf(", Redis %.2f cores (%.1f µs per decision)", r.redisCPU/r.res.Elapsed.Seconds(), perDecision(r.redisCPU, r.res))
		}
		return s + fmt.Sprintf(", of %d shared with the load client", runtime.NumCPU())
	}
	ratio := func(g *section.Goal, a, b float64, target float64, id string, callers int) {
		if b <= 0 {
			g.Measured = fmt.Sprintf("%.0f vs %.0f decisions/s: no ratio", a, b)
			return
		}
		x := a / b
		g.Met = x >= target
		g.Measured = fmt.Sprintf("%.0f vs %.0f decisions/s: %.2fx", a, b, x)
		if !g.Met {
			g.Limit = limitOf(id, callers)
		}
	}
	rl, setting := bestRL(many, faster)
	if s := get("sluice-grpc-redis", many); s != nil && rl != nil {
		g := section.Goal{Goal: fmt.Sprintf("gRPC ShouldRateLimit at %d callers: at least 2x envoyproxy/ratelimit's best setting on the same Redis (%s)", many, setting), Target: ">= 2.00x"}
		ratio(&g, s.res.PerSecond(), rl.res.PerSecond(), 2, "sluice-grpc-redis", many)
		gs = append(gs, g)
	}
	for _, store := range []string{"memory", "redis"} {
		if s, empty := get("sluice-grpc-"+store, many), get("empty-grpc", many); s != nil && empty != nil {
			g := section.Goal{Goal: fmt.Sprintf("gRPC ShouldRateLimit at %d callers (%s store): at least 70%% of an empty gRPC server's decisions/s", many, store), Target: ">= 0.70x"}
			ratio(&g, s.res.PerSecond(), empty.res.PerSecond(), 0.7, "sluice-grpc-"+store, many)
			gs = append(gs, g)
		}
	}
	rl, setting = bestRL(1, quicker)
	if s := get("sluice-grpc-redis", 1); s != nil && rl != nil {
		a, b := s.res.Quantile(0.5), rl.res.Quantile(0.5)
		g := section.Goal{
			Goal:     fmt.Sprintf("gRPC ShouldRateLimit, 1 caller, on Redis: no slower than envoyproxy/ratelimit (its quicker setting: %s)", setting),
			Target:   "p50 <= envoyproxy/ratelimit's",
			Measured: fmt.Sprintf("p50 %s vs %s; %.0f vs %.0f decisions/s", us(a), us(b), s.res.PerSecond(), rl.res.PerSecond()),
			Met:      a <= b,
		}
		if !g.Met {
			g.Limit = limitOf("sluice-grpc-redis", 1)
		}
		gs = append(gs, g)
	}
	for _, callers := range []int{many, 1} {
		for _, store := range []string{"memory", "redis"} {
			if s, empty := get("sluice-http-"+store, callers), get("empty-http", callers); s != nil && empty != nil {
				g := section.Goal{Goal: fmt.Sprintf("HTTP POST /v1/check at %d caller(s) (%s store): at least 70%% of an empty net/http handler's decisions/s", callers, store), Target: ">= 0.70x"}
				ratio(&g, s.res.PerSecond(), empty.res.PerSecond(), 0.7, "sluice-http-"+store, callers)
				gs = append(gs, g)
			}
		}
	}
	return gs
}

// notes says how the figures were taken: the machine, the versions, the
// method.
func notes(e *env, took time.Duration) []string {
	ns := []string{
		fmt.Sprintf("Machine: %s, %d CPUs, %s; %s. The load client, every server and redis-server share these CPUs: only ratios within one run mean anything.", cpuModel(), runtime.NumCPU(), kernel(), goVersion()),
		"Versions: sluice serve built from this checkout; envoyproxy/ratelimit " + ratelimitVersion + " and gubernator " + gubernatorVer + ", installed with go install into ~/.cache/sluice; " + redisVersion() + ".",
		fmt.Sprintf("Load: sluice's load client (internal/loadgen, as `sluice bench`), %d keys in turn (10.x.y.z), every call admitted (a limit of %d per second per key); gRPC over one HTTP/2 connection, HTTP/1.1 over one keep-alive connection per caller. Each server is driven %s to warm it, then %s at %d callers and %s at 1.",
			e.f.keys, limitPerSec, e.f.warmup, e.f.duration, e.f.callers, e.f.duration1),
		"CPU per decision: the user and system CPU time of the server's process (and of redis-server) from /proc/<pid>/stat over the measured run, divided by the decisions answered.",
		"envoyproxy/ratelimit and sluice serve read the same config file (one descriptor key, a per-second limit) and talk to the same redis-server; envoyproxy/ratelimit runs with its defaults and with REDIS_PIPELINE_WINDOW=500us (its README's recommended range is 150us-500us; REDIS_PIPELINE_LIMIT has no effect in its radix v4 client), Redis in single mode (Cluster mode needs a Redis Cluster).",
		"sluice serve runs with its defaults (among them --gc-min-heap-mib 64: the collector waits for 64 MiB while the live heap is small), and the empty servers collect garbage the same way (GOGC off under a 64 MiB memory limit), so that the comparison with them is of the work per request; the peers run with their own defaults, and the settings listed.",
		"gubernator runs as a one-node cluster and keeps its counts in memory (it has no Redis store): compare it with sluice serve on the memory store.",
		"sluice serve is profiled (pprof CPU, --pprof-listen) after its measured runs, at each number of callers, for the profile table and for what limits a goal not met.",
		fmt.Sprintf("The whole run took %s.", took.Round(time.Second)),
	}
	return ns
}

func flagsNote(f flags) string {
	var extra []string
	if f.only != "" {
		extra = append(extra, "-only "+f.only)
	}
	if f.callers != 256 {
		extra = append(extra, fmt.Sprintf("-callers %d", f.callers))
	}
	if f.keys != 1000 {
		extra = append(extra, fmt.Sprintf("-keys %d", f.keys))
	}
	if f.duration != 8*time.Second {
		extra = append(extra, "-duration "+f.duration.String())
	}
	if f.duration1 != 4*time.Second {
		extra = append(extra, "-duration1 "+f.duration1.String())
	}
	if f.warmup != time.Second {
		extra = append(extra, "-warmup "+f.warmup.String())
	}
	if f.profile != 3*time.Second {
		extra = append(extra, "-profile "+f.profile.String())
	}
	if len(extra) == 0 {
		return ""
	}
	return " " + strings.Join(extra, " ")
}

// us writes d in microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func kernel() string {
	out, err := exec.Command("uname", "-sr").Output()
	if err != nil {
		return "unknown kernel"
	}
	return strings.TrimSpace(string(out))
}

func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "redis-server (version unknown)"
	}
	// Redis server v=7.0.15 sha=... → redis-server 7.0.15
	for f := range strings.FieldsSeq(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "redis-server " + v
		}
	}
	return strings.TrimSpace(string(out))
}
