package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/bench/internal/section"
)

// warm decides every key once, so that the timed calls find state.
func warm(ctx context.Context, name string, allow allowFunc) error {
	for _, k := range keys {
		ok, err := allow(ctx, k)
		if err != nil {
			return fmt.Errorf("%s: warm-up on %q: %w", name, k, err)
		}
		if !ok {
			return fmt.Errorf("%s: warm-up on %q was denied: the limit should admit every call", name, k)
		}
	}
	return nil
}

// sample is one implementation's figures of one round.
type sample struct {
	rate, p50, p99        float64 // 256 callers: decisions/s, µs
	redisCPU              float64 // per decision, µs: the process
	redisSys              float64 // per decision, µs: its system time
	scriptCPU, otherCPU   float64 // per decision, µs: commandstats
	scriptCalls           float64 // per decision
	clientCPU, redisCores float64 // µs per decision; cores
	byCommand             map[string][2]float64
	rate1, p50one, p90one float64 // 1 caller
	p99one                float64
	clientCores           float64
	clientCPU1, redisCPU1 float64 // 1 caller, µs per decision
	scriptCalls1          float64 // 1 caller, per decision
}

// stats are an implementation's samples over the rounds.
type stats struct {
	impl          impl
	samples       []sample
	clientProfile string // top functions of the harness's CPU profile of the last concurrent run, or ""
}

func (s *stats) med(f func(sample) float64) float64 {
	xs := make([]float64, len(s.samples))
	for i, x := range s.samples {
		xs[i] = f(x)
	}
	return median(xs)
}

var prefixSeq int

// nextPrefix returns a key prefix no other run of the process used.
func nextPrefix() string {
	prefixSeq++
	return "b" + strconv.Itoa(prefixSeq)
}

// runOut is what a timed run saw: the load, the server's CPU over it
// and its commandstats, and the harness's CPU profile when one was asked.
type runOut struct {
	res          loadResult
	user, system time.Duration // redis-server's
	usec, calls  map[string]int64
	profile      string // CPU profile file of the harness, or ""
}

// cpu is the server's user and system CPU over the run.
func (o runOut) cpu() time.Duration { return o.user + o.system }

// timedRun opens im with fresh clients, warms it (doWarm), and runs
// callers for dur, with the server's CPU and commandstats around the
// load, and, when profile is not empty, a CPU profile of this process
// named profile over the load.
func timedRun(ctx context.Context, srv *server, im impl, ks []string, r rate, callers int, dur time.Duration, doWarm bool, prof *profiler, profile string) (runOut, error) {
	var o runOut
	allow, closeFn, err := im.open(ctx, srv.addr, nextPrefix(), r)
	if err != nil {
		return o, fmt.Errorf("%s: %w", im.name, err)
	}
	defer closeFn()
	if doWarm {
		if err := warm(ctx, im.name, allow); err != nil {
			return o, err
		}
	}
	if err := srv.admin.ConfigResetStat(ctx).Err(); err != nil {
		return o, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	var stop func() string
	if profile != "" {
		if stop, err = prof.start(profile); err != nil {
			slog.Warn("no CPU profile", "run", profile, "err", err)
		}
	}
	u0, s0 := srv.cpu()
	o.res = load(ctx, allow, ks, callers, dur)
	u1, s1 := srv.cpu()
	if stop != nil {
		o.profile = stop()
	}
	o.user, o.system = u1-u0, s1-s0
	if o.usec, o.calls, err = commandStats(ctx, srv.admin); err != nil {
		return o, err
	}
	if o.res.firstErr != nil {
		return o, fmt.Errorf("%s: %d errors in %d decisions, the first: %w", im.name, o.res.errors, o.res.decisions, o.res.firstErr)
	}
	return o, ctx.Err()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// throughput measures every Redis implementation at c.callers and at one
// caller, round by round, and adds its tables, charts and goals to sec.
func throughput(ctx context.Context, c config, srv *server, prof *profiler, sec *section.Section) error {
	is := redisImpls()
	all := make([]*stats, len(is))
	for i, im := range is {
		all[i] = &stats{impl: im}
	}
	for round := range c.rounds {
		for j := range is {
			st := all[(j+round)%len(is)]
			im := st.impl
			var s sample
			// The last round profiles the harness (the client side) of
			// sluice's runs, for the goals it does not meet.
			profile := ""
			if round == c.rounds-1 && im.algo != "" {
				profile = "concurrent-" + string(im.algo)
				if im.settle {
					profile += "-settle"
				}
			}
			o, err := timedRun(ctx, srv, im, keys, admitAll, c.callers, c.d256, true, prof, profile)
			if err != nil {
				return err
			}
			res, cpu, usec, calls := o.res, o.cpu(), o.usec, o.calls
			if o.profile != "" {
				if st.clientProfile, err = topFunctions(ctx, o.profile, "", 5); err != nil {
					slog.Warn("reading a CPU profile", "err", err)
				}
			}
			s.redisSys = us(o.system) / float64(res.decisions)
			if res.denied > 0 {
				return fmt.Errorf("%s: %d of %d decisions denied at %d callers: the limit should admit every call", im.name, res.denied, res.decisions, c.callers)
			}
			n := float64(res.decisions)
			s.rate, s.p50, s.p99 = res.rate(), us(res.quantile(0.5)), us(res.quantile(0.99))
			s.redisCPU = us(cpu) / n
			s.redisCores = cpu.Seconds() / res.elapsed.Seconds()
			s.clientCPU = us(res.clientCPU) / n
			s.clientCores = res.clientCPU.Seconds() / res.elapsed.Seconds()
			var scriptUsec, otherUsec, scriptCalls int64
			s.byCommand = map[string][2]float64{}
			for cmd, u := range usec {
				if isAdmin(cmd) {
					continue
				}
				if isScript(cmd) {
					scriptUsec += u
					scriptCalls += calls[cmd]
				} else {
					otherUsec += u
				}
				s.byCommand[cmd] = [2]float64{float64(u) / n, float64(calls[cmd]) / n}
			}
			s.scriptCPU, s.otherCPU, s.scriptCalls = float64(scriptUsec)/n, float64(otherUsec)/n, float64(scriptCalls)/n

			o1, err := timedRun(ctx, srv, im, keys, admitAll, 1, c.d1, true, prof, "")
			if err != nil {
				return err
			}
			res1, cpu1 := o1.res, o1.cpu()
			if res1.denied > 0 {
				return fmt.Errorf("%s: %d of %d decisions denied at 1 caller: the limit should admit every call", im.name, res1.denied, res1.decisions)
			}
			n1 := float64(res1.decisions)
			s.rate1, s.p50one, s.p90one, s.p99one = res1.rate(), us(res1.quantile(0.5)), us(res1.quantile(0.9)), us(res1.quantile(0.99))
			s.clientCPU1, s.redisCPU1 = us(res1.clientCPU)/n1, us(cpu1)/n1
			s.scriptCalls1 = float64(scriptRuns(o1.calls)) / n1
			st.samples = append(st.samples, s)
			slog.Info("measured", "round", round+1, "impl", im.name,
				"callers", c.callers, "rate", int(s.rate), "p50_us", s.p50, "redis_us_per_decision", s.redisCPU,
				"rate_1", int(s.rate1), "p50_1_us", s.p50one)
		}
	}

	var rows, rows1 [][]string
	var bars, bars1, barsCPU []section.Bar
	for _, st := range all {
		rows = append(rows, []string{st.impl.name,
			fmtRate(st.med(func(s sample) float64 { return s.rate })),
			fmtUs(st.med(func(s sample) float64 { return s.p50 })),
			fmtUs(st.med(func(s sample) float64 { return s.p99 })),
			fmtUs(st.med(func(s sample) float64 { return s.redisCPU })),
			fmtUs(st.med(func(s sample) float64 { return s.scriptCPU })),
			fmt.Sprintf("%.2f", st.med(func(s sample) float64 { return s.scriptCalls })),
			fmtUs(st.med(func(s sample) float64 { return s.otherCPU })),
			fmt.Sprintf("%.2f", st.med(func(s sample) float64 { return s.redisCores })),
			fmtUs(st.med(func(s sample) float64 { return s.clientCPU })),
		})
		rows1 = append(rows1, []string{st.impl.name,
			fmtRate(st.med(func(s sample) float64 { return s.rate1 })),
			fmtUs(st.med(func(s sample) float64 { return s.p50one })),
			fmtUs(st.med(func(s sample) float64 { return s.p90one })),
			fmtUs(st.med(func(s sample) float64 { return s.p99one })),
			fmtUs(st.med(func(s sample) float64 { return s.redisCPU1 })),
			fmtUs(st.med(func(s sample) float64 { return s.clientCPU1 })),
		})
		bars = append(bars, section.Bar{Label: st.impl.name, Value: round1(st.med(func(s sample) float64 { return s.rate }))})
		bars1 = append(bars1, section.Bar{Label: st.impl.name, Value: round1(st.med(func(s sample) float64 { return s.p50one }))})
		barsCPU = append(barsCPU, section.Bar{Label: st.impl.name, Value: round2(st.med(func(s sample) float64 { return s.redisCPU }))})
	}
	sec.Tables = append(sec.Tables,
		section.Table{
			Caption: fmt.Sprintf("Redis store, %d callers, %d keys, every call admitted (medians of %d rounds; a reserve+settle row's call, its decision, is a Reserve of cost %d and its Settle at %d; an acquire+release row's, an Acquire of a concurrency slot and its Release)", c.callers, keySpace, c.rounds, settleReserve, settleActual),
			Header:  []string{"implementation", "decisions/s", "p50", "p99", "Redis CPU per decision (process)", "script time per decision (commandstats)", "script calls per decision", "other commands' time per decision (commandstats)", "Redis cores", "client CPU per decision"},
			Rows:    rows,
		},
		section.Table{
			Caption: fmt.Sprintf("Redis store, 1 caller, %d keys, every call admitted (medians of %d interleaved rounds; one-caller latency on a VM moves between runs, compare within the table; a reserve+settle row's call is a Reserve and its Settle, an acquire+release row's an Acquire and its Release)", keySpace, c.rounds),
			Header:  []string{"implementation", "decisions/s", "p50", "p90", "p99", "Redis CPU per decision (process)", "client CPU per decision"},
			Rows:    rows1,
		})
	var cmdRows [][]string
	for _, st := range all {
		cmdRows = append(cmdRows, []string{st.impl.name, byCommand(st.samples[len(st.samples)-1].byCommand, 0)})
	}
	sec.Tables = append(sec.Tables, section.Table{
		Caption: fmt.Sprintf("Redis time by command per decision at %d callers (INFO commandstats of the last round; a command a script runs is counted on its own line and again inside the script's time)", c.callers),
		Header:  []string{"implementation", "command: µs and calls per decision"},
		Rows:    cmdRows,
	})
	sec.Charts = append(sec.Charts,
		section.Chart{Name: "redis-concurrent", Title: fmt.Sprintf("Redis store, %d callers: decisions per second (higher is better)", c.callers), Unit: "decisions/s", Bars: bars},
		section.Chart{Name: "redis-one-caller-p50", Title: "Redis store, 1 caller: p50 latency (lower is better)", Unit: "µs", Bars: bars1},
		section.Chart{Name: "redis-cpu", Title: fmt.Sprintf("Redis CPU per decision at %d callers, redis-server process (lower is better)", c.callers), Unit: "µs", Bars: barsCPU},
	)

	base := all[slices.IndexFunc(all, func(s *stats) bool { return s.impl.name == "redis_rate" })]
	for _, st := range all {
		a := st.impl.algo
		if a == "" || st.impl.settle || st.impl.slot {
			continue // a peer; a reserve+settle or an acquire+release, whose goals settleCosts and slotCosts add
		}
		// Redis CPU per decision.
		target := 0.25
		if a == sluice.SlidingWindow || a == sluice.SlidingLog {
			target = 0.5
		}
		cpu, baseCPU := st.med(func(s sample) float64 { return s.redisCPU }), base.med(func(s sample) float64 { return s.redisCPU })
		cmdCPU, baseCmd := st.med(func(s sample) float64 { return s.scriptCPU }), base.med(func(s sample) float64 { return s.scriptCPU })
		g := section.Goal{
			Goal:     fmt.Sprintf("Redis CPU per decision, %s, %d callers", a, c.callers),
			Target:   fmt.Sprintf("at most %s of redis_rate's", fraction(target)),
			Measured: fmt.Sprintf("%s vs redis_rate %s (%.2f×); script time (commandstats) %s vs %s", fmtUs(cpu), fmtUs(baseCPU), cpu/baseCPU, fmtUs(cmdCPU), fmtUs(baseCmd)),
			Met:      cpu <= target*baseCPU,
		}
		if !g.Met {
			g.Limit = fmt.Sprintf("redis-server's %s per decision is %s of system time (socket I/O) and %s of user time; by command (commandstats): %s",
				fmtUs(cpu), fmtUs(st.med(func(s sample) float64 { return s.redisSys })), fmtUs(cpu-st.med(func(s sample) float64 { return s.redisSys })),
				byCommand(st.samples[len(st.samples)-1].byCommand, 3))
		}
		sec.Goals = append(sec.Goals, g)

		// Decisions per second at c.callers.
		rt, baseRt := st.med(func(s sample) float64 { return s.rate }), base.med(func(s sample) float64 { return s.rate })
		g = section.Goal{
			Goal:     fmt.Sprintf("decisions/s at %d callers, %s", c.callers, a),
			Target:   "at least 2× redis_rate's",
			Measured: fmt.Sprintf("%s vs redis_rate %s (%.2f×)", fmtRate(rt), fmtRate(baseRt), rt/baseRt),
			Met:      rt >= 2*baseRt,
		}
		if !g.Met {
			g.Limit = fmt.Sprintf("CPU by process over the run: redis-server %.2f cores (%s per decision), the client %.2f cores (%s per decision), of %d",
				st.med(func(s sample) float64 { return s.redisCores }), fmtUs(cpu),
				st.med(func(s sample) float64 { return s.clientCores }), fmtUs(st.med(func(s sample) float64 { return s.clientCPU })), runtime.NumCPU())
			if st.clientProfile != "" {
				g.Limit += "; the client's CPU by function (pprof, flat): " + st.clientProfile
			}
		}
		sec.Goals = append(sec.Goals, g)

		// One caller's p50, as the median of the rounds' ratios.
		ratios := make([]float64, len(st.samples))
		for i := range st.samples {
			ratios[i] = st.samples[i].p50one / base.samples[i].p50one
		}
		ratio := median(ratios)
		p50, baseP50 := st.med(func(s sample) float64 { return s.p50one }), base.med(func(s sample) float64 { return s.p50one })
		g = section.Goal{
			Goal:     "one caller p50, " + string(a),
			Target:   "no worse than redis_rate's",
			Measured: fmt.Sprintf("%s vs redis_rate %s (median ratio over %d interleaved rounds %.2f×)", fmtUs(p50), fmtUs(baseP50), len(ratios), ratio),
			Met:      ratio <= 1,
		}
		if !g.Met {
			g.Limit = fmt.Sprintf("per decision at 1 caller: client CPU %s vs redis_rate %s, Redis CPU %s vs %s",
				fmtUs(st.med(func(s sample) float64 { return s.clientCPU1 })), fmtUs(base.med(func(s sample) float64 { return s.clientCPU1 })),
				fmtUs(st.med(func(s sample) float64 { return s.redisCPU1 })), fmtUs(base.med(func(s sample) float64 { return s.redisCPU1 })))
		}
		sec.Goals = append(sec.Goals, g)
	}
	settleCosts(c, all, sec)
	slotCosts(c, all, sec)
	return nil
}

// scriptRuns counts the script runs among commandstats calls.
func scriptRuns(calls map[string]int64) int64 {
	var n int64
	for cmd, k := range calls {
		if isScript(cmd) {
			n += k
		}
	}
	return n
}

// isScript reports whether a commandstats command runs a script (whose
// time includes the commands the script runs).
func isScript(cmd string) bool {
	switch cmd {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

// isAdmin reports whether a commandstats command is the harness's own.
func isAdmin(cmd string) bool {
	return cmd == "info" || strings.HasPrefix(cmd, "config")
}

// byCommand names the n costliest commands (all for 0) of a per-decision
// breakdown, with their µs and calls per decision.
func byCommand(m map[string][2]float64, n int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(m[b][0], m[a][0]) })
	var parts []string
	if n == 0 {
		n = len(names)
	}
	for _, k := range names[:min(n, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %s in %.2f calls", k, fmtUs(m[k][0]), m[k][1]))
	}
	return strings.Join(parts, ", ")
}

// abusiveKey hammers one key with c.callers callers under a small limit:
// sluice with its deny cache, sluice without, redis_rate.
func abusiveKey(ctx context.Context, c config, srv *server, sec *section.Section) error {
	is := abusiveImpls()
	type abuse struct{ rates, admitted, calls []float64 }
	got := make([]abuse, len(is))
	rounds := min(c.rounds, 3)
	for round := range rounds {
		for j := range is {
			i := (j + round) % len(is)
			im := is[i]
			o, err := timedRun(ctx, srv, im, []string{"abuser"}, abusive, c.callers, c.dAbuse, false, nil, "")
			if err != nil {
				return err
			}
			res, calls := o.res, o.calls
			var total int64
			for cmd, n := range calls {
				if isScript(cmd) {
					total += n
				}
			}
			got[i].rates = append(got[i].rates, res.rate())
			got[i].admitted = append(got[i].admitted, float64(res.admitted))
			got[i].calls = append(got[i].calls, float64(total))
			slog.Info("measured abusive key", "round", round+1, "impl", im.name, "rate", int(res.rate()), "admitted", res.admitted, "redis_commands", total)
			if im.algo != "" && res.admitted != int64(abusive.n) {
				return fmt.Errorf("%s admitted %d requests of one key under a limit of %d per %s: not exact", im.name, res.admitted, abusive.n, abusive.per)
			}
		}
	}
	var rows [][]string
	var bars []section.Bar
	for i, im := range is {
		adm := slices.Clone(got[i].admitted)
		slices.Sort(adm)
		rows = append(rows, []string{im.name, fmtRate(median(got[i].rates)), admittedText(adm), fmt.Sprintf("%.0f", median(got[i].calls))})
		bars = append(bars, section.Bar{Label: im.name, Value: round1(median(got[i].rates))})
	}
	sec.Tables = append(sec.Tables, section.Table{
		Caption: fmt.Sprintf("One abusive key, %d callers for %s, limit %d per %s (gcra; medians of %d rounds)", c.callers, c.dAbuse, abusive.n, abusive.per, rounds),
		Header:  []string{"implementation", "decisions/s", "admitted (each round)", "script calls to Redis in the run"},
		Rows:    rows,
	})
	sec.Charts = append(sec.Charts, section.Chart{Name: "abusive-key", Title: fmt.Sprintf("One abusive key, %d callers: decisions per second (higher is better)", c.callers), Unit: "decisions/s", Bars: bars})
	dc, base := median(got[0].rates), median(got[2].rates)
	g := section.Goal{
		Goal:     fmt.Sprintf("deny cache: one abusive key, %d callers", c.callers),
		Target:   fmt.Sprintf("at least 10× redis_rate's decisions/s, admitting exactly the limit (%d)", abusive.n),
		Measured: fmt.Sprintf("%s vs redis_rate %s (%.1f×); admitted %s (redis_rate %s)", fmtRate(dc), fmtRate(base), dc/base, admittedText(got[0].admitted), admittedText(got[2].admitted)),
		Met:      dc >= 10*base, // the admitted count was checked above: a run that was not exact fails
	}
	if !g.Met {
		g.Limit = fmt.Sprintf("the script calls left (%.0f in a run, vs %.0f without the cache) and the in-process answer: profile the harness with the deny cache", median(got[0].calls), median(got[1].calls))
	}
	sec.Goals = append(sec.Goals, g)
	return nil
}

func admittedText(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(parts, ", ")
}

// memoryUsage measures MEMORY USAGE per client key for every Redis
// implementation with its default key prefix, one at a time on an
// emptied server.
func memoryUsage(ctx context.Context, srv *server, sec *section.Section) error {
	type mem struct {
		bytes, keys, keyLen float64 // per client key
	}
	measure := func(im impl, requests int) (mem, error) {
		if err := srv.admin.FlushAll(ctx).Err(); err != nil {
			return mem{}, fmt.Errorf("FLUSHALL: %w", err)
		}
		allow, closeFn, err := im.open(ctx, srv.addr, "", keepState)
		if err != nil {
			return mem{}, fmt.Errorf("%s: %w", im.name, err)
		}
		defer closeFn()
		for range requests {
			if err := warm(ctx, im.name, allow); err != nil {
				return mem{}, err
			}
		}
		b, n, kl, err := memoryPerKey(ctx, srv.admin)
		if err != nil {
			return mem{}, err
		}
		if n == 0 {
			return mem{}, fmt.Errorf("%s left no key in Redis", im.name)
		}
		return mem{float64(b) / keySpace, float64(n) / keySpace, float64(kl) / float64(n)}, nil
	}
	var rows [][]string
	var bars []section.Bar
	targets := map[sluice.Algorithm]float64{sluice.FixedWindow: 56, sluice.GCRA: 56, sluice.TokenBucket: 72, sluice.SlidingWindow: 72}
	for _, im := range redisImpls() {
		if im.settle || im.slot {
			continue // its state is a decision's; none is left once a slot is released
		}
		m, err := measure(im, 1)
		if err != nil {
			return err
		}
		rows = append(rows, []string{im.name, fmt.Sprintf("%.0f B", m.bytes), fmt.Sprintf("%.2f", m.keys), fmt.Sprintf("%.1f B", m.keyLen)})
		bars = append(bars, section.Bar{Label: im.name, Value: round1(m.bytes)})
		if t, ok := targets[im.algo]; ok {
			g := section.Goal{
				Goal:     "Redis memory per key, " + string(im.algo),
				Target:   fmt.Sprintf("at most %.0f B", t),
				Measured: fmt.Sprintf("%.0f B (%.2f Redis keys per client key, names of %.1f B)", m.bytes, m.keys, m.keyLen),
				Met:      m.bytes <= t,
			}
			if !g.Met {
				g.Limit = fmt.Sprintf("the key's name: the value is one integer, kept in Redis's 16-byte object, and the dict entry is 24 B; the name (%.1f B here, with the default prefix sluice and keys client-N) takes jemalloc's 32-byte class, as any name of 15 to 30 bytes does, so 72 B is the floor for these names; with WithPrefix(\"s\") and client keys of at most 7 bytes the name fits 16 B and the key 56 B (store/redis TestMemoryUsage)", m.keyLen)
			}
			sec.Goals = append(sec.Goals, g)
		}
		if im.algo == sluice.SlidingLog {
			const n = 10
			m10, err := measure(im, n)
			if err != nil {
				return err
			}
			per := (m10.bytes - m.bytes) / (n - 1)
			rows = append(rows, []string{im.name + fmt.Sprintf(" (%d requests)", n), fmt.Sprintf("%.0f B", m10.bytes), fmt.Sprintf("%.2f", m10.keys), fmt.Sprintf("%.1f B", m10.keyLen)})
			sec.Goals = append(sec.Goals, section.Goal{
				Goal:     "Redis memory per key, sliding_log",
				Target:   "a stated bound per key",
				Measured: fmt.Sprintf("%.0f B with 1 entry, %.0f B with %d: about %.0f B + %.1f B per admitted request in the period, so at most %.0f B + %.1f B × Limit (Limit ≤ %d)", m.bytes, m10.bytes, n, m.bytes-per, per, m.bytes-per, per, sluice.MaxLogLimit),
				Met:      per > 0,
			})
		}
	}
	sec.Tables = append(sec.Tables, section.Table{
		Caption: fmt.Sprintf("Redis memory per client key: MEMORY USAGE (SAMPLES 0) summed over the server's keys after one request of each of %d keys (limit %d per %s, every library's default key prefix), over %d", keySpace, keepState.n, keepState.per, keySpace),
		Header:  []string{"implementation", "bytes per client key", "Redis keys per client key", "mean key name"},
		Rows:    rows,
	})
	sec.Charts = append(sec.Charts, section.Chart{Name: "redis-memory", Title: "Redis memory per client key, MEMORY USAGE (lower is better)", Unit: "B", Bars: bars})
	return srv.admin.FlushAll(ctx).Err()
}

// heapResult is the live heap per key of an in-process store.
type heapResult struct {
	name  string
	bytes float64
}

// The environment of a heap-per-key child: the store's name and the
// number of keys.
const (
	heapStoreEnv = "LIBBENCH_HEAP_STORE"
	heapKeysEnv  = "LIBBENCH_HEAP_KEYS"
)

// heapChild, in a process started by heapPerKey (heapStoreEnv set),
// measures the heap per key of its store, prints it and exits. Otherwise
// it returns at once.
func heapChild() {
	name := os.Getenv(heapStoreEnv)
	if name == "" {
		return
	}
	n, err := strconv.Atoi(os.Getenv(heapKeysEnv))
	if err == nil {
		var v float64
		if v, err = heapOne(name, n); err == nil {
			fmt.Println(v)
			os.Exit(0)
		}
	}
	fmt.Fprintln(os.Stderr, "libbench heap child:", err)
	os.Exit(1)
}

// heapPerKey measures the live Go heap per key of each in-process store,
// each in a process of its own (this program again, with heapStoreEnv
// set), so that no store's garbage, finalizers or goroutines blur
// another's.
func heapPerKey(ctx context.Context, n int) ([]heapResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var out []heapResult
	for _, s := range memoryStores() {
		if s.open == nil {
			continue
		}
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), heapStoreEnv+"="+s.name, heapKeysEnv+"="+strconv.Itoa(n))
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("heap per key of %s: %w", s.name, err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if err != nil {
			return nil, fmt.Errorf("heap per key of %s: %q: %w", s.name, b, err)
		}
		out = append(out, heapResult{s.name, v})
		slog.Info("measured heap per key", "store", s.name, "keys", n, "bytes_per_key", v)
	}
	return out, nil
}

// heapOne measures, in this process, the live Go heap per key that the
// store named name holds after one request of each of n keys, made up as
// they are inserted, so that a store that keeps the caller's key string
// pays for it.
func heapOne(name string, n int) (float64, error) {
	i := slices.IndexFunc(memoryStores(), func(s memStore) bool { return s.name == name && s.open != nil })
	if i < 0 {
		return 0, fmt.Errorf("%s=%q: no such in-process store", heapStoreEnv, name)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	allow, err := memoryStores()[i].open(keepState)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	for i := range n {
		if ok, err := allow(ctx, "client-"+strconv.Itoa(i)); err != nil || !ok {
			return 0, fmt.Errorf("%s: request %d: allowed %v, error %v", name, i, ok, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(allow)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n), nil
}

// memoryStore adds the memory store's micro-benchmark figures (from
// c.micro) and heap per key to sec.
func memoryStore(ctx context.Context, c config, heap []heapResult, prof *profiler, sec *section.Section) {
	// profiled names what limits a goal from a profile of its benchmark.
	profiled := func(pattern string) string {
		cpu, allocs, err := prof.bench(ctx, pattern)
		if err != nil {
			slog.Warn("no profile", "bench", pattern, "err", err)
			return err.Error()
		}
		return fmt.Sprintf("profile of %s: CPU by function (flat) %s; allocations by function %s", pattern, cpu, allocs)
	}
	heapOf := func(name string) string {
		for _, h := range heap {
			if h.name == name {
				return fmt.Sprintf("%.0f B", h.bytes)
			}
		}
		return "–"
	}
	var heapRows [][]string
	for _, h := range heap {
		heapRows = append(heapRows, []string{h.name, fmt.Sprintf("%.0f B", h.bytes)})
	}
	sec.Tables = append(sec.Tables, section.Table{
		Caption: fmt.Sprintf("In-process stores: live Go heap per key after one request of each of %d keys (runtime.MemStats.HeapAlloc after GC, key strings included)", c.heapKeys),
		Header:  []string{"store", "heap per key"},
		Rows:    heapRows,
	})
	const baseline = 480 // the issue's ~480 B RSS per key before this work
	g := section.Goal{
		Goal:     "memory store: bytes per key measured and reduced",
		Target:   fmt.Sprintf("measured; below the %d B per key (RSS) before this work", baseline),
		Measured: "sluice gcra " + heapOf("sluice gcra") + " per key (x/time/rate in a sync.Map " + heapOf("x/time/rate sync.Map") + ")",
	}
	for _, h := range heap {
		if h.name == "sluice gcra" {
			g.Met = h.bytes < baseline
		}
	}
	if !g.Met {
		g.Limit = "the store's entry (key copy, state, list links, table slot): see store/memory's package documentation"
	}
	sec.Goals = append(sec.Goals, g)

	f, err := os.Open(c.micro)
	if err != nil {
		slog.Warn("no memory-store micro-benchmarks", "file", c.micro, "err", err)
		sec.Notes = append(sec.Notes, fmt.Sprintf("The memory store's micro-benchmarks were not run (%s: %v).", c.micro, err))
		sec.Goals = append(sec.Goals, section.Goal{Goal: "memory store within 1.5× of x/time/rate, 0 allocs/op", Target: "≤ 1.5× ns/op, 0 allocs/op", Measured: "not measured: " + c.micro + " missing", Limit: "not measured"})
		return
	}
	defer f.Close()
	m, err := parseMicro(f)
	if err != nil {
		slog.Warn("reading memory-store micro-benchmarks", "file", c.micro, "err", err)
		sec.Goals = append(sec.Goals, section.Goal{Goal: "memory store within 1.5× of x/time/rate, 0 allocs/op", Target: "≤ 1.5× ns/op, 0 allocs/op", Measured: "not measured: " + err.Error(), Limit: "not measured"})
		return
	}
	cell := func(name, unit string) string {
		v, ok := m.get(name, unit)
		switch {
		case !ok:
			return "–"
		case unit == "ns/op":
			return fmtNs(v)
		default:
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	var rows [][]string
	var bars []section.Bar
	for _, s := range memoryStores() {
		rows = append(rows, []string{s.name,
			cell("MemoryOneKey/"+s.bench+"/serial", "ns/op"), cell("MemoryOneKey/"+s.bench+"/parallel", "ns/op"), cell("MemoryOneKey/"+s.bench+"/serial", "allocs/op"),
			cell("Memory/"+s.bench+"/serial", "ns/op"), cell("Memory/"+s.bench+"/parallel", "ns/op"), cell("Memory/"+s.bench+"/serial", "allocs/op"),
			cell("Memory1M/"+s.bench+"/serial", "ns/op"), cell("Memory1M/"+s.bench+"/parallel", "ns/op"),
			heapOf(s.name),
		})
		if v, ok := m.get("MemoryOneKey/"+s.bench+"/serial", "ns/op"); ok {
			bars = append(bars, section.Bar{Label: s.name, Value: round1(v)})
		}
	}
	sec.Tables = append(sec.Tables, section.Table{
		Caption: "In-process stores, go test benchmarks (medians of the runs in " + c.micro + "; parallel: 2 goroutines on GOMAXPROCS=2; the one key and 1M keys under a limit whose state lives, 2^30 per 10 years, 1000 keys at 1e6 per second)",
		Header:  []string{"store", "1 key ns/op", "1 key parallel ns/op", "1 key allocs/op", "1000 keys ns/op", "1000 keys parallel ns/op", "1000 keys allocs/op", "1M keys ns/op", "1M keys parallel ns/op", "heap per key"},
		Rows:    rows,
	})
	if len(bars) > 0 {
		sec.Charts = append(sec.Charts, section.Chart{Name: "memory-one-key", Title: "In-process stores, one key, one caller: ns per decision (lower is better)", Unit: "ns/op", Bars: bars})
	}
	base, baseOK := m.get("MemoryOneKey/x-time-rate/serial", "ns/op")
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket} {
		name := "MemoryOneKey/sluice-" + string(a) + "/serial"
		v, ok := m.get(name, "ns/op")
		allocs, _ := m.get(name, "allocs/op")
		allocsK, okK := m.get("Memory/sluice-"+string(a)+"/serial", "allocs/op")
		g := section.Goal{Goal: "memory store, one key, " + string(a), Target: "within 1.5× of x/time/rate's ns/op, 0 allocs/op"}
		if !ok || !baseOK {
			g.Measured, g.Limit = "not measured: no "+name+" or x-time-rate row in "+c.micro, "not measured"
		} else {
			g.Measured = fmt.Sprintf("%s vs x/time/rate %s (%.2f×), %s allocs/op (1000 keys: %s)", fmtNs(v), fmtNs(base), v/base, strconv.FormatFloat(allocs, 'f', -1, 64), map[bool]string{true: strconv.FormatFloat(allocsK, 'f', -1, 64), false: "–"}[okK])
			g.Met = v <= 1.5*base && allocs == 0
			if !g.Met {
				g.Limit = profiled("^BenchmarkMemoryOneKey$/^sluice-" + string(a) + "$/^serial$")
			}
		}
		sec.Goals = append(sec.Goals, g)
	}
	ser, ok1 := m.get("Memory1M/sluice-gcra/serial", "ns/op")
	par, ok2 := m.get("Memory1M/sluice-gcra/parallel", "ns/op")
	g = section.Goal{Goal: "memory store: parallel throughput over 1M keys", Target: fmt.Sprintf("scales with the cores: at least 1.5× one goroutine's throughput with %d", runtime.GOMAXPROCS(0))}
	if !ok1 || !ok2 {
		g.Measured, g.Limit = "not measured: no Memory1M/sluice-gcra rows in "+c.micro, "not measured"
	} else {
		xs, _ := m.get("Memory1M/x-time-rate-syncmap/serial", "ns/op")
		xp, _ := m.get("Memory1M/x-time-rate-syncmap/parallel", "ns/op")
		g.Measured = fmt.Sprintf("gcra %s/op serial, %s/op parallel: %.2f× (x/time/rate in a sync.Map: %.2f×)", fmtNs(ser), fmtNs(par), ser/par, xs/max(xp, 1e-9))
		g.Met = ser/par >= 1.5
		if !g.Met {
			g.Limit = profiled("^BenchmarkMemory1M$/^sluice-gcra$/^parallel$")
		}
	}
	sec.Goals = append(sec.Goals, g)
}

func fmtRate(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM/s", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk/s", x/1e3)
	default:
		return fmt.Sprintf("%.0f/s", x)
	}
}

func fmtUs(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f µs", x)
	case x >= 10:
		return fmt.Sprintf("%.1f µs", x)
	default:
		return fmt.Sprintf("%.2f µs", x)
	}
}

func fmtNs(x float64) string {
	if x >= 100 {
		return fmt.Sprintf("%.0f ns", x)
	}
	return fmt.Sprintf("%.1f ns", x)
}

func fraction(f float64) string {
	if f == 0.25 {
		return "a quarter"
	}
	return "half"
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
