package storetest

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// A limit keeps its state across a change of its Limit or Burst: a
// client's state lives under the limit's Identity (name, algorithm,
// period), and every algorithm reads what was spent under other numbers.

// cstep is a step under a limit of its own: the limit changes between the
// steps on one key, as a reloaded policy changes it.
type cstep struct {
	l sluice.Limit
	step
}

// runChanging plays steps for key, each under its limit, and checks that
// the state lives exactly as long as its ResetAfter after every step at
// the instant of a write: an admitted request, or the first decision of a
// bucket under another interval, which converts its state. (Redis ages a
// key by its own clock, not by the fake one.)
func (e *env) runChanging(key string, steps []cstep) {
	e.t.Helper()
	var written time.Duration
	var interval time.Duration // of the bucket state stored
	for i, s := range steps {
		r := e.play(key, s.l, i, s.step)
		bucket := s.l.Algorithm == sluice.TokenBucket || s.l.Algorithm == sluice.GCRA
		if r.Allowed || bucket && s.l.Interval() != interval {
			written, interval = s.at, s.l.Interval()
		}
		if s.at == written {
			e.checkTTL(key, s.l, r)
		}
	}
}

// testChangeLimit: 80 of 100 per hour spent, the limit raised to 150
// leaves 70, not 150; lowered to 50 it denies, with nothing Remaining,
// until the window or the bucket admits again: exactly at now+RetryAfter,
// not a microsecond before. A bucket's Burst changes the same way, and
// every state lives as long as its ResetAfter under the new limit.
func testChangeLimit(t *testing.T, newStore Factory) {
	const us = time.Microsecond
	each(t, func(t *testing.T, a sluice.Algorithm) {
		l100 := sluice.PerHour(100).Using(a)
		l150, l50 := sluice.PerHour(150).Using(a), sluice.PerHour(50).Using(a)
		var steps []cstep
		switch a {
		case sluice.FixedWindow:
			steps = []cstep{
				{l100, step{0, 80, ok(20, h)}},
				{l150, step{10 * s, 0, ok(70, h-10*s)}},
				{l150, step{10 * s, 70, ok(0, h-10*s)}},
				{l150, step{10 * s, 1, deny(0, h-10*s, h-10*s)}},
				{l50, step{10 * s, 1, deny(0, h-10*s, h-10*s)}}, // 150 counted of 50
				{l50, step{h - us, 1, deny(0, us, us)}},
				{l50, step{h, 1, ok(49, h)}},
			}
		case sluice.SlidingWindow:
			// The 80 of the first hour weigh 80×(1−e/h) in the second; one
			// more fits in 50 at e = 31/80 h = 1395s.
			steps = []cstep{
				{l100, step{0, 80, ok(20, 2*h)}},
				{l150, step{10 * s, 0, ok(70, 2*h-10*s)}},
				{l50, step{10 * s, 1, deny(0, 2*h-10*s, h+1385*s)}},
				{l50, step{h + 1395*s - us, 1, deny(0, 2205*s+us, us)}},
				{l50, step{h + 1395*s, 1, ok(0, 2*h-1395*s)}},
			}
		case sluice.SlidingLog:
			// 40 at 0 and 40 at 10m: under 50, the 31st oldest must expire,
			// one of those at 0.
			steps = []cstep{
				{l100, step{0, 40, ok(60, h)}},
				{l100, step{10 * m, 40, ok(20, h)}},
				{l150, step{10 * m, 0, ok(70, h)}},
				{l50, step{10 * m, 1, deny(0, h, 50*m)}},
				{l50, step{h - us, 1, deny(0, 10*m+us, us)}},
				{l50, step{h, 10, ok(0, h)}},
				{l50, step{h, 1, deny(0, h, 10*m)}},
			}
		default:
			// A token every 36s under 100, 24s under 150, 72s under 50: the
			// tokens owed convert, rounded up to the microsecond.
			t1 := 7262*s + 2*us // when the debt under 50 lets one through
			steps = []cstep{
				{l100, step{0, 80, ok(20, 2880*s)}},
				// 10s later 79 tokens and 26s of one are owed: 79×24s + 17.333334s.
				{l150, step{10 * s, 0, ok(70, 1913333334*us)}},
				{l150, step{10 * s, 70, ok(0, 3593333334*us)}},
				{l150, step{10 * s, 1, deny(0, 3593333334*us, 17333334*us)}},
				// 149 tokens and 17.333334s of one: 149×72s + 52.000002s.
				{l50, step{10 * s, 1, deny(0, 10780000002*us, 7252000002*us)}},
				{l50, step{t1 - us, 1, deny(0, 3528000001*us, us)}},
				{l50, step{t1, 1, ok(0, h)}},
				// A burst of 80 holds 30 more; of 40, 10 fewer than owed.
				{l50.WithBurst(80), step{t1, 0, ok(30, h)}},
				{l50.WithBurst(40), step{t1, 1, deny(0, h, 792*s)}},
				{l50.WithBurst(40), step{t1 + 792*s - us, 1, deny(0, 2808000001*us, us)}},
				{l50.WithBurst(40), step{t1 + 792*s, 1, ok(0, 2880*s)}},
			}
		}
		newEnv(t, newStore).runChanging("client", steps)
	})
}

// testChangingMatchesReference: the randomized comparison with the
// reference, with the Limit and Burst of each request drawn at random.
//
// A bucket decision under another interval writes its converted state
// whatever it decides, for as long as its debt; where that is short, a
// Redis server would expire it by its real clock while the fake one
// stands still. So costs stay below every capacity (a denied request then
// owes more than an interval), and only the Burst of a bucket changes in
// a decision under several limits (which may convert a bucket that
// admits, with any debt, when another limit denies).
func testChangingMatchesReference(t *testing.T, newStore Factory) {
	minute := func(a sluice.Algorithm, limits ...int) []sluice.Limit {
		var v []sluice.Limit
		for _, n := range limits {
			v = append(v, sluice.PerMinute(n).Using(a))
		}
		return v
	}
	bursts := func(l sluice.Limit, bursts ...int) []sluice.Limit {
		var v []sluice.Limit
		for _, b := range bursts {
			v = append(v, l.WithBurst(b))
		}
		return v
	}
	for i, a := range sluice.Algorithms {
		v := minute(a, 7, 3, 12, 5)
		if a == sluice.TokenBucket || a == sluice.GCRA {
			v = append(bursts(testLimit(a), 4, 9), v...)
		}
		t.Run(string(a), func(t *testing.T) { matchReference(t, newStore, [][]sluice.Limit{v}, uint64(200+i), 2) })
	}
	// Intervals of hours, whose products exceed 2^53 (rescale rounds a
	// token's leftover up), and from a token every 315s to one every ten
	// years (debts beyond 2^51µs, capped).
	buckets := []struct {
		name    string
		limits  []sluice.Limit
		maxCost int
	}{
		{"daily", []sluice.Limit{sluice.PerDay(1).WithBurst(4), sluice.PerDay(24).WithBurst(4), sluice.PerDay(7).WithBurst(4), sluice.PerDay(1000).WithBurst(4)}, 3},
		{"extreme", []sluice.Limit{sluice.Per(1_000_000, sluice.MaxPeriod), sluice.Per(1, sluice.MaxPeriod).WithBurst(7)}, 6},
	}
	for i, b := range buckets {
		for j, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
			var v []sluice.Limit
			for _, l := range b.limits {
				v = append(v, l.Using(a))
			}
			t.Run(b.name+" "+string(a), func(t *testing.T) {
				matchReference(t, newStore, [][]sluice.Limit{v}, uint64(210+2*i+j), b.maxCost)
			})
		}
	}
	t.Run("multi", func(t *testing.T) {
		variants := [][]sluice.Limit{
			bursts(testLimit(sluice.TokenBucket), 3, 5, 8),
			bursts(testLimit(sluice.GCRA), 3, 5, 8),
			minute(sluice.FixedWindow, 7, 3, 12),
			minute(sluice.SlidingWindow, 7, 3, 12),
			minute(sluice.SlidingLog, 7, 3, 12),
		}
		matchReference(t, newStore, variants, 220, 2)
	})
}
