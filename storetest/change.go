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
