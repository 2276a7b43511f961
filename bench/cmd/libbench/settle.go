package main

// Reserve and settle beside one decision: sluice's Limiter.Reserve and
// Reservation.Settle on the Redis store, measured in the throughput
// rounds next to Limiter.Allow of the same algorithm, and the two
// goals of it.

import (
	"fmt"
	"runtime"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/bench/internal/section"
)

// settleAlgorithms are the algorithms whose reserve+settle is measured,
// whose refunds differ under admitAll: fixed_window's takes the unit off
// the window's count and writes the count back; gcra's finds the bucket
// refilled (a cost of 2 refills in 2 µs at 1e6 per second, before the
// settle reaches Redis), so it gives back nothing, the exact answer, and
// writes nothing: a refund script's call without its write.
var settleAlgorithms = []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA}

// A reserve+settle call reserves settleReserve and settles at
// settleActual: Settle refunds the difference (on the Redis store, one
// run of lua/refund.lua).
const (
	settleReserve = 2
	settleActual  = 1
)

// settleTimeTarget is the bound on a reserve+settle's time per
// call at the concurrent callers, in one decision's.
const settleTimeTarget = 2.2

// settleName is the name of the reserve+settle rows of algorithm a.
func settleName(a sluice.Algorithm) string { return "sluice " + string(a) + " reserve+settle" }

// settleCost is what a reserve and its settle cost beside one decision
// under one algorithm, from the samples of both implementations: sample i
// of each is round i, in which the two ran one after the other.
type settleCost struct {
	algo   sluice.Algorithm
	rounds int
	many   settleAt // at the concurrent callers
	one    settleAt // at 1 caller

	// The concurrent runs, for what limits a goal not met.
	decSys, pairSys         float64 // redis-server system time per call, µs
	redisCores, clientCores float64 // the pair's, by process
	clientCPU               float64 // the pair's, µs per call
	commands                string  // µs and calls per pair by command, last round
	profile                 string  // the client's CPU by function in the pair's last run, or ""
}

// settleAt compares a reserve+settle with a decision at one number of
// callers. Ratios and the settle's CPU are medians of each round's
// figure, the rest medians of the rounds.
type settleAt struct {
	callers             int
	decRate, pairRate   float64 // calls per second
	timeRatio           float64 // a pair's time per call (1/rate) in decisions'
	decCPU, pairCPU     float64 // Redis CPU per call, µs (the process)
	settleCPU           float64 // pairCPU − decCPU, µs
	cpuRatio            float64 // settleCPU / decCPU
	pairRatio           float64 // pairCPU / decCPU
	decCalls, pairCalls float64 // script calls per call
}

// callFigures are a sample's figures at one number of callers.
type callFigures struct{ rate, cpu, calls float64 }

// compareAt compares pair with dec over their first n rounds, at the
// callers whose figures f picks out of a sample.
func compareAt(pair, dec *stats, n, callers int, f func(sample) callFigures) settleAt {
	perRound := func(g func(p, d callFigures) float64) float64 {
		xs := make([]float64, n)
		for i := range n {
			xs[i] = g(f(pair.samples[i]), f(dec.samples[i]))
		}
		return median(xs)
	}
	med := func(st *stats, g func(callFigures) float64) float64 {
		return median(mapSamples(st.samples[:n], func(x sample) float64 { return g(f(x)) }))
	}
	rate := func(x callFigures) float64 { return x.rate }
	cpu := func(x callFigures) float64 { return x.cpu }
	calls := func(x callFigures) float64 { return x.calls }
	return settleAt{
		callers: callers,
		decRate: med(dec, rate), pairRate: med(pair, rate),
		timeRatio: perRound(func(p, d callFigures) float64 { return d.rate / p.rate }),
		decCPU:    med(dec, cpu), pairCPU: med(pair, cpu),
		settleCPU: perRound(func(p, d callFigures) float64 { return p.cpu - d.cpu }),
		cpuRatio:  perRound(func(p, d callFigures) float64 { return (p.cpu - d.cpu) / d.cpu }),
		pairRatio: perRound(func(p, d callFigures) float64 { return p.cpu / d.cpu }),
		decCalls:  med(dec, calls), pairCalls: med(pair, calls),
	}
}

func mapSamples(ss []sample, f func(sample) float64) []float64 {
	xs := make([]float64, len(ss))
	for i, x := range ss {
		xs[i] = f(x)
	}
	return xs
}

// newSettleCost compares pair, a reserve+settle implementation's stats,
// with dec, the decision's of its algorithm, at callers and at 1 caller,
// over the rounds both have.
func newSettleCost(pair, dec *stats, callers int) settleCost {
	n := min(len(pair.samples), len(dec.samples))
	s := settleCost{algo: pair.impl.algo, rounds: n, profile: pair.clientProfile}
	s.many = compareAt(pair, dec, n, callers, func(x sample) callFigures { return callFigures{x.rate, x.redisCPU, x.scriptCalls} })
	s.one = compareAt(pair, dec, n, 1, func(x sample) callFigures { return callFigures{x.rate1, x.redisCPU1, x.scriptCalls1} })
	med := func(st *stats, f func(sample) float64) float64 { return median(mapSamples(st.samples[:n], f)) }
	s.decSys = med(dec, func(x sample) float64 { return x.redisSys })
	s.pairSys = med(pair, func(x sample) float64 { return x.redisSys })
	s.redisCores = med(pair, func(x sample) float64 { return x.redisCores })
	s.clientCores = med(pair, func(x sample) float64 { return x.clientCores })
	s.clientCPU = med(pair, func(x sample) float64 { return x.clientCPU })
	if n > 0 {
		s.commands = byCommand(pair.samples[n-1].byCommand, 3)
	}
	return s
}

// goals are the two goals of reserve and settle under s.algo at
// the concurrent callers: the settle's Redis CPU at most one decision's,
// and a reserve and its settle in at most settleTimeTarget decisions'
// time per call.
func (s settleCost) goals() []section.Goal {
	m, o := s.many, s.one
	cpu := section.Goal{
		Goal:   fmt.Sprintf("settle Redis CPU, %s, %d callers", s.algo, m.callers),
		Target: "at most one decision's (Allow): the Redis CPU per reserve+settle minus per decision, of the same round",
		Measured: fmt.Sprintf("settle %s vs decision %s (median ratio over %d rounds %.2f×); reserve+settle %s per call; 1 caller: settle %s vs decision %s (%.2f×)",
			fmtUs(m.settleCPU), fmtUs(m.decCPU), s.rounds, m.cpuRatio, fmtUs(m.pairCPU), fmtUs(o.settleCPU), fmtUs(o.decCPU), o.cpuRatio),
		Met: m.cpuRatio <= 1,
	}
	if !cpu.Met {
		cpu.Limit = fmt.Sprintf("script calls per call: decision %.2f, reserve+settle %.2f (1 caller: %.2f and %.2f), at %d callers refunds riding in the decisions' batch.lua calls (refund_first.lua); a refund's script holds all five algorithms where a decision's holds its own; redis-server system time (socket I/O) per call: decision %s, reserve+settle %s; by command per reserve+settle (commandstats): %s",
			m.decCalls, m.pairCalls, o.decCalls, o.pairCalls, m.callers, fmtUs(s.decSys), fmtUs(s.pairSys), s.commands)
	}
	tm := section.Goal{
		Goal:   fmt.Sprintf("reserve+settle time per call, %s, %d callers", s.algo, m.callers),
		Target: fmt.Sprintf("at most %.1f× one decision's (time per call: 1 / calls per second over the run)", settleTimeTarget),
		Measured: fmt.Sprintf("%s per call (%s) vs decision %s (%s): median ratio over %d rounds %.2f×",
			fmtUs(1e6/m.pairRate), fmtRate(m.pairRate), fmtUs(1e6/m.decRate), fmtRate(m.decRate), s.rounds, m.timeRatio),
		Met: m.timeRatio <= settleTimeTarget,
	}
	if !tm.Met {
		tm.Limit = fmt.Sprintf("CPU by process over the reserve+settle run: redis-server %.2f cores (%s per call), the client %.2f cores (%s per call), of %d; script calls per call %.2f vs the decision's %.2f",
			s.redisCores, fmtUs(m.pairCPU), s.clientCores, fmtUs(s.clientCPU), runtime.NumCPU(), m.pairCalls, m.decCalls)
		if s.profile != "" {
			tm.Limit += "; the client's CPU by function (pprof, flat): " + s.profile
		}
	}
	return []section.Goal{cpu, tm}
}

// row is a's row of the reserve-and-settle table.
func (a settleAt) row(algo sluice.Algorithm) []string {
	return []string{string(algo), fmt.Sprint(a.callers), fmtRate(a.decRate), fmtRate(a.pairRate), fmt.Sprintf("%.2f×", a.timeRatio),
		fmtUs(a.decCPU), fmtUs(a.pairCPU), fmtUs(a.settleCPU), fmt.Sprintf("%.2f×", a.cpuRatio),
		fmt.Sprintf("%.2f", a.decCalls), fmt.Sprintf("%.2f", a.pairCalls)}
}

// settleCosts adds the reserve-and-settle table, its note and goals to
// sec, from the throughput rounds' stats (all).
func settleCosts(c config, all []*stats, sec *section.Section) {
	var rows [][]string
	for _, pair := range all {
		if !pair.impl.settle {
			continue
		}
		var dec *stats
		for _, st := range all {
			if st.impl.algo == pair.impl.algo && !st.impl.settle {
				dec = st
			}
		}
		s := newSettleCost(pair, dec, c.callers)
		rows = append(rows, s.many.row(s.algo), s.one.row(s.algo))
		sec.Goals = append(sec.Goals, s.goals()...)
	}
	if rows == nil {
		return
	}
	sec.Notes = append(sec.Notes, fmt.Sprintf("Reserve and settle: a reserve+settle row's call is Limiter.Reserve(ctx, key, limit, %d) then Reservation.Settle(ctx, %d) on the same key, admitted calls only (a denial fails the run), over the keys and limits of the decision rows, and counts as one call. It runs next to the decision (Limiter.Allow) of its algorithm in every round's order (which rotates), with fresh clients. The settle alone cannot be timed on its own: a settle needs its reservation, taken just before (a reservation taken before the timed run would be settled against state that has since expired or refilled), so its Redis CPU is derived as the pair's Redis CPU per call minus the decision's, round by round. The reserve is a decision of cost %d through the same script and coalescer as Allow's cost 1, so the difference is what settling adds to deciding, including the change it makes to how reserves share script calls. Under these limits gcra's refund gives back nothing: at 1e6 per second its bucket refills a cost of 2 in 2 µs, before the settle reaches Redis, so its rows measure a refund call that writes nothing; fixed_window's refund takes the unit off the window's count in place (one INCRBY).", settleReserve, settleActual, settleReserve))
	sec.Tables = append(sec.Tables, section.Table{
		Caption: fmt.Sprintf("Reserve and settle beside one decision, Redis store (Reserve of cost %d, Settle at %d, one call; medians of %d interleaved rounds; the ratios and the settle alone are medians of each round's figure; time per call is 1 / calls per second)", settleReserve, settleActual, c.rounds),
		Header:  []string{"algorithm", "callers", "decisions/s (Allow)", "reserve+settle/s", "time per call: reserve+settle ÷ decision", "Redis CPU per decision", "Redis CPU per reserve+settle", "settle alone (difference)", "settle ÷ decision", "script calls per decision", "script calls per reserve+settle"},
		Rows:    rows,
	})
}
