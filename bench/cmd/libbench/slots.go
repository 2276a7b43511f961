package main

// A concurrency slot's acquire and release beside one decision: sluice's
// Limiter.Acquire under a Concurrency limit then Reservation.Release on
// the Redis store, measured in the throughput rounds next to
// Limiter.Allow of slotBase, and the goal of it.

import (
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/bench/internal/section"
)

// slotBase is the algorithm of the decision an acquire+release is
// measured beside.
const slotBase = sluice.GCRA

// slotLimit is the limit of the acquire+release rows: a slot for every
// caller on one key (at most 4096 callers), each a lease of
// sluice.DefaultSlotTTL, so that every acquire is admitted.
var slotLimit = sluice.Concurrent(sluice.MaxLogLimit)

// slotCPUTarget is the bound on an acquire+release's Redis CPU
// at the concurrent callers, in one decision's.
const slotCPUTarget = 2.2

// slotName is the name of the acquire+release rows.
const slotName = "sluice concurrency acquire+release"

// slotGoal is the goal of an acquire+release (s, against
// slotBase's decision) at the concurrent callers: its Redis CPU at most
// slotCPUTarget decisions', the median of the rounds' ratios.
func slotGoal(s settleCost) section.Goal {
	m, o := s.many, s.one
	g := section.Goal{
		Goal:   fmt.Sprintf("acquire+release Redis CPU, %d callers", m.callers),
		Target: fmt.Sprintf("at most %.1f× one decision's (%s Allow): the Redis CPU per Acquire and Release over per decision, of the same round", slotCPUTarget, slotBase),
		Measured: fmt.Sprintf("%s vs decision %s (median ratio over %d rounds %.2f×); time per call %s vs %s (%.2f×); 1 caller: %s vs %s (%.2f×)",
			fmtUs(m.pairCPU), fmtUs(m.decCPU), s.rounds, m.pairRatio, fmtUs(1e6/m.pairRate), fmtUs(1e6/m.decRate), m.timeRatio, fmtUs(o.pairCPU), fmtUs(o.decCPU), o.pairRatio),
		Met: m.pairRatio <= slotCPUTarget,
	}
	if !g.Met {
		g.Limit = fmt.Sprintf("script calls per call: decision %.2f, acquire+release %.2f (1 caller: %.2f and %.2f); an acquire runs batch.lua's general form (a slot is no compact cost), a release refund_first.lua or refund.lua, whose script holds all six algorithms where a decision's holds its own; redis-server system time (socket I/O) per call: decision %s, acquire+release %s; by command per acquire+release (commandstats): %s",
			m.decCalls, m.pairCalls, o.decCalls, o.pairCalls, fmtUs(s.decSys), fmtUs(s.pairSys), s.commands)
	}
	return g
}

// slotRow is a's row of the acquire-and-release table.
func (a settleAt) slotRow() []string {
	return []string{fmt.Sprint(a.callers), fmtRate(a.decRate), fmtRate(a.pairRate), fmt.Sprintf("%.2f×", a.timeRatio),
		fmtUs(a.decCPU), fmtUs(a.pairCPU), fmt.Sprintf("%.2f×", a.pairRatio),
		fmt.Sprintf("%.2f", a.decCalls), fmt.Sprintf("%.2f", a.pairCalls)}
}

// slotCosts adds the acquire-and-release table, its note and goal to
// sec, from the throughput rounds' stats (all).
func slotCosts(c config, all []*stats, sec *section.Section) {
	var pair, dec *stats
	for _, st := range all {
		switch {
		case st.impl.slot:
			pair = st
		case st.impl.algo == slotBase && !st.impl.settle:
			dec = st
		}
	}
	if pair == nil || dec == nil {
		return
	}
	s := newSettleCost(pair, dec, c.callers)
	sec.Goals = append(sec.Goals, slotGoal(s))
	sec.Notes = append(sec.Notes, fmt.Sprintf("Acquire and release: the %s row's call is Limiter.Acquire(ctx, key, sluice.Concurrent(%d)) then Reservation.Release(ctx) on the same key (a slot of a sorted set of leases, lua/concurrency.lua, freed by lua/refund.lua), admitted calls only (a denial fails the run), over the keys of the decision rows, and counts as one call. It runs next to the decision of sluice %s (Limiter.Allow) in every round's order (which rotates), with fresh clients; its ratios to that decision are medians of each round's.", slotName, slotLimit.Limit, slotBase))
	sec.Tables = append(sec.Tables, section.Table{
		Caption: fmt.Sprintf("Acquire and release of a concurrency slot beside one decision (sluice %s Allow), Redis store (medians of %d interleaved rounds; the ratios are medians of each round's; time per call is 1 / calls per second)", slotBase, c.rounds),
		Header:  []string{"callers", "decisions/s (Allow)", "acquire+release/s", "time per call: acquire+release ÷ decision", "Redis CPU per decision", "Redis CPU per acquire+release", "Redis CPU: acquire+release ÷ decision", "script calls per decision", "script calls per acquire+release"},
		Rows:    [][]string{s.many.slotRow(), s.one.slotRow()},
	})
}
