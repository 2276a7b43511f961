package linear

import (
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// Margin is the least lifetime, in fake time, of any state a decision of
// a run writes: Run refuses limits whose state may live less, and no
// round decides within Margin of the end of a fixed window. A Redis
// server counts that lifetime in real time, so a run must end within
// Margin of real time for no key to expire under it (runs take seconds).
const Margin = 5 * time.Minute

// MaxCost is the largest cost a run's decisions carry; every cost is 1 to
// MaxCost. Cost 0 is left out: a token bucket's cost-0 decision stores
// the debt it reads, which may be a microsecond, and a Redis key that
// expires in real time while the fake clock still needs it is no fault of
// the store.
const MaxCost = 3

// A Key is one client key of a run and the limits of its decisions:
// one, or several checked all or nothing (Limiter.AllowAll).
type Key struct {
	// Name is the client key.
	Name string
	// Limits are its limits, with distinct identities.
	Limits []sluice.Limit
}

// lives reports a limit whose written state may live less than Margin:
// a fixed window written within Margin of its end (where no round
// decides) lives until that end; a sliding window or log at least a
// Period; a bucket's debt at least its cost, a token Interval or more.
func lives(l sluice.Limit) error {
	if l.Capacity() < MaxCost {
		return fmt.Errorf("capacity %d: want at least the largest cost, %d", l.Capacity(), MaxCost)
	}
	switch l.Algorithm {
	case sluice.FixedWindow:
		if l.Period < 2*(Margin+Span) {
			return fmt.Errorf("period %v: want at least %v, since no round decides in the last %v of a window", l.Period, 2*(Margin+Span), Margin+Span)
		}
	case sluice.SlidingWindow, sluice.SlidingLog:
		if l.Period < Margin {
			return fmt.Errorf("period %v: want at least Margin (%v)", l.Period, Margin)
		}
	default:
		if l.Interval() < Margin {
			return fmt.Errorf("token interval %v: want at least Margin (%v)", l.Interval(), Margin)
		}
	}
	return nil
}

// Under ServerClock a run lasts a few seconds of the server's clock: a
// limit is timeless, to whether a decision is admitted and to its
// Remaining, if no run is likely to cross the end of its window (one run
// in 10^7 would cross the end of a year's) and none refills a token of
// it.
const (
	minTimelessPeriod   = 365 * 24 * time.Hour
	minTimelessInterval = 24 * time.Hour
)

// timeless reports a limit that time matters to in a ServerClock run.
func timeless(l sluice.Limit) error {
	if l.Capacity() < MaxCost {
		return fmt.Errorf("capacity %d: want at least the largest cost, %d", l.Capacity(), MaxCost)
	}
	switch l.Algorithm {
	case sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog:
		if l.Period < minTimelessPeriod {
			return fmt.Errorf("period %v: want at least %v on the server's clock, so that time does not matter", l.Period, minTimelessPeriod)
		}
	default:
		if l.Interval() < minTimelessInterval {
			return fmt.Errorf("token interval %v: want at least %v on the server's clock, so that time does not matter", l.Interval(), minTimelessInterval)
		}
	}
	return nil
}

// Tick is the step between the rounds of the runs of Keys: an hour, in
// which a bucket of Keys refills 12 tokens and a fixed window of 3 hours
// moves a third of the way.
const Tick = time.Hour

// Keys returns the keys of the linearizability tests, their names
// starting with prefix: one per algorithm, and one of three limits
// checked all or nothing. With Tick between rounds and about 16
// decisions per key a round of costs 1 to MaxCost (24 clients deciding 4
// times a round), each key admits some decisions of most rounds and
// denies others.
func Keys(prefix string) []Key {
	one := func(l sluice.Limit) Key { return Key{Name: prefix + string(l.Algorithm), Limits: []sluice.Limit{l}} }
	return []Key{
		one(sluice.Per(60, 3*time.Hour).Using(sluice.FixedWindow)),
		one(sluice.Per(60, 3*time.Hour).Using(sluice.SlidingWindow)),
		one(sluice.Per(60, 3*time.Hour).Using(sluice.SlidingLog)),
		one(sluice.PerHour(12).WithBurst(20)),
		one(sluice.PerHour(12).WithBurst(20).Using(sluice.GCRA)),
		{Name: prefix + "multi", Limits: []sluice.Limit{
			sluice.Per(50, 2*time.Hour).Using(sluice.SlidingWindow),
			sluice.PerHour(10).WithBurst(16),
			sluice.Per(80, 4*time.Hour).Using(sluice.FixedWindow),
		}},
	}
}

// ServerKeys returns the keys of Keys for a ServerClock run: the same
// algorithms over MaxPeriod (10 years; their next window ends in
// December 2029), with capacities of 300 (a bucket refills a token every
// 12 days), so that about 150 decisions of costs 1 to MaxCost on a key
// are admitted before its limit denies the rest.
func ServerKeys(prefix string) []Key {
	one := func(l sluice.Limit) Key { return Key{Name: prefix + string(l.Algorithm), Limits: []sluice.Limit{l}} }
	long := sluice.MaxPeriod
	return []Key{
		one(sluice.Per(300, long).Using(sluice.FixedWindow)),
		one(sluice.Per(300, long).Using(sluice.SlidingWindow)),
		one(sluice.Per(300, long).Using(sluice.SlidingLog)),
		one(sluice.Per(300, long)),
		one(sluice.Per(300, long).Using(sluice.GCRA)),
		{Name: prefix + "multi", Limits: []sluice.Limit{
			sluice.Per(250, long).Using(sluice.SlidingWindow),
			sluice.Per(300, long).WithBurst(200),
			sluice.Per(280, long).Using(sluice.FixedWindow),
		}},
	}
}
