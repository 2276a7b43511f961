package linear

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/storetest"
)

// Epoch is where every key's fake clock starts: storetest's, aligned to
// whole days, so that windows start at round offsets from it.
var Epoch = storetest.Epoch

// Margin is the least lifetime, in fake time, of any state a decision of
// a run writes: Run refuses limits whose state may live less, and no
// round decides within Margin of the end of a fixed window. A Redis
// server counts that lifetime in real time, so a run must end within
// Margin of real time for no key to expire under it (runs take seconds).
const Margin = 5 * time.Minute

// Within a round, the j-th decision on a key decides at its round's
// instant plus j×Step, and at most Span−Step after it: concurrent
// decisions carry instants out of order by less than Span, a clock
// stepping back by less than a minute, which every store tolerates (the
// memory store keeps expired state for a minute so that such a step back
// still finds it).
const (
	Step = time.Second
	Span = 50 * time.Second
)

// MaxCost is the largest cost a run's decisions carry; every cost is 1 to
// MaxCost. Cost 0 is left out: a token bucket's cost-0 decision stores
// the debt it reads, which may be a microsecond, and a Redis key that
// expires in real time while the fake clock still needs it is no fault of
// the store.
const MaxCost = 3

// A Key is one client key of a run and the limits of its decisions:
// one, or several checked all or nothing (Limiter.AllowAll).
type Key struct {
	Name   string
	Limits []sluice.Limit
}

// Run is one recorded run, in rounds. In each round each of Clients
// goroutines per store sends PerRound decisions, one after another, each
// on a key drawn from Keys with a cost of 1 to MaxCost, from a Limiter of
// its own over its store (so that it passes its own instant:
// sluice.WithClock) that returns store errors (sluice.ReturnErrors, no
// store timeout); every client ends a round before any begins the next.
// Round r decides at r×Tick from Epoch (later when that falls within
// Margin+Span of the end of a fixed window of the keys), plus j×Step for
// the j-th decision on a key in it: between rounds windows end and
// buckets refill, within one the instants are nearly the same.
type Run struct {
	// Stores are the replicas: give each its own connection pool.
	Stores []sluice.Store
	// Clients is the number of concurrent clients per store.
	Clients int
	// Rounds is the number of rounds, PerRound the decisions of each
	// client in each.
	Rounds, PerRound int
	// Keys are the keys the clients decide on.
	Keys []Key
	// Tick is how far the clock moves from one round to the next.
	Tick time.Duration
	// Seed seeds the clients' draws of keys and costs.
	Seed uint64
	// ServerClock leaves the instant of each decision to the store (no
	// WithClock), over limits of ServerKeys' length: see "Time".
	ServerClock bool
}

// History is a recorded run: one porcupine.Operation per decision, its
// Input an Input and its Output an Output, Call and Return in ns since
// the run started (monotonic).
type History []porcupine.Operation

// Record runs r and returns its history. Any store error fails t: a
// decision whose outcome is unknown has no place in the model.
func (r Run) Record(t testing.TB) History {
	t.Helper()
	if err := r.check(); err != nil {
		t.Fatalf("linear: %v", err)
	}
	n := len(r.Stores) * r.Clients
	sc := newSchedule(r, n)
	start := time.Now()
	hs := make([]History, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for id := range n {
		c := &client{id: id, run: &r, sched: sc, start: start, h: make(History, 0, r.Rounds*r.PerRound)}
		if r.ServerClock {
			c.lim = sluice.New(r.Stores[id%len(r.Stores)])
		} else {
			c.lim = sluice.New(r.Stores[id%len(r.Stores)], sluice.WithClock(func() time.Time { return c.now }))
		}
		wg.Go(func() { hs[id], errs[id] = c.play() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("linear: %v", err)
	}
	return slices.Concat(hs...)
}

// check reports a run that cannot be recorded or whose state may expire
// under it (see Margin).
func (r Run) check() error {
	switch {
	case len(r.Stores) == 0 || r.Clients < 1 || r.Rounds < 1 || r.PerRound < 1 || len(r.Keys) == 0:
		return fmt.Errorf("run of %d stores × %d clients × %d rounds × %d decisions on %d keys: want at least one of each",
			len(r.Stores), r.Clients, r.Rounds, r.PerRound, len(r.Keys))
	case r.Tick < Span:
		return fmt.Errorf("tick %v: want at least a round's Span (%v), so that rounds do not overlap in time", r.Tick, Span)
	}
	for _, k := range r.Keys {
		if len(k.Limits) == 0 {
			return fmt.Errorf("key %q has no limits", k.Name)
		}
		for _, l := range k.Limits {
			check := lives
			if r.ServerClock {
				check = timeless
			}
			if err := check(l); err != nil {
				return fmt.Errorf("key %q: %s: %w", k.Name, l, err)
			}
		}
	}
	return nil
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

// schedule is a run's clock and its rounds' barriers.
type schedule struct {
	bases []time.Time      // each round's instant
	count [][]atomic.Int64 // decisions so far, by round and key
	ended []sync.WaitGroup // by round: done by each client as it ends it
	index map[string]int   // of each key in Keys
}

func newSchedule(r Run, clients int) *schedule {
	sc := &schedule{bases: roundBases(r), count: make([][]atomic.Int64, r.Rounds), ended: make([]sync.WaitGroup, r.Rounds), index: map[string]int{}}
	for i := range sc.count {
		sc.count[i] = make([]atomic.Int64, len(r.Keys))
		sc.ended[i].Add(clients)
	}
	for i, k := range r.Keys {
		sc.index[k.Name] = i
	}
	return sc
}

// roundBases returns the instant of each round of r: r×Tick from Epoch,
// moved to the next window's start when a round would decide within
// Margin of the end of a fixed window of any key.
func roundBases(r Run) []time.Time {
	var periods []time.Duration
	for _, k := range r.Keys {
		for _, l := range k.Limits {
			if l.Algorithm == sluice.FixedWindow {
				periods = append(periods, l.Period)
			}
		}
	}
	bases := make([]time.Time, r.Rounds)
	var at time.Duration
	for i := range bases {
		at = max(at, time.Duration(i)*r.Tick)
		for moved := true; moved; {
			moved = false
			for _, p := range periods {
				if at%p > p-Margin-Span {
					at += p - at%p
					moved = true
				}
			}
		}
		bases[i] = Epoch.Add(at)
		at += Span
	}
	return bases
}

// at returns the instant of the next decision on key k in round r.
func (sc *schedule) at(r, k int) time.Time {
	j := sc.count[r][k].Add(1) - 1
	return sc.bases[r].Add(min(time.Duration(j)*Step, Span-Step))
}

// client is one goroutine of a run, with its Limiter and the instant
// that Limiter's clock returns.
type client struct {
	id    int
	run   *Run
	sched *schedule
	start time.Time
	lim   *sluice.Limiter
	now   time.Time // read by lim's clock, in this goroutine only
	h     History
}

// play sends the client's decisions, round by round, and returns them.
// After a store error it sends no more but still ends every round, so
// that the other clients are not kept waiting.
func (c *client) play() (History, error) {
	rng := rand.New(rand.NewPCG(c.run.Seed, uint64(c.id)))
	var err error
	for round := range c.run.Rounds {
		for range c.run.PerRound {
			k := c.run.Keys[rng.IntN(len(c.run.Keys))]
			cost := 1 + rng.IntN(MaxCost)
			if err == nil {
				err = c.decide(round, k, cost)
			}
		}
		c.sched.ended[round].Done()
		c.sched.ended[round].Wait()
	}
	return c.h, err
}

// decide sends one decision and records it: AllowN for a key of one
// limit (a store's OneTaker, where it has one), AllowAll for several.
func (c *client) decide(round int, k Key, cost int) error {
	ctx := context.Background()
	if c.run.ServerClock {
		c.now = c.start // see "Time"
	} else {
		c.now = c.sched.at(round, c.sched.index[k.Name])
	}
	in := Input{Key: k.Name, Limits: k.Limits, Cost: cost, Now: c.now.UnixMicro(), ServerClock: c.run.ServerClock}
	var rs []sluice.Result
	var err error
	call := time.Since(c.start).Nanoseconds()
	if len(k.Limits) == 1 {
		var r sluice.Result
		r, err = c.lim.AllowN(ctx, k.Name, k.Limits[0], cost)
		rs = []sluice.Result{r}
	} else {
		var m sluice.MultiResult
		m, err = c.lim.AllowAll(ctx, k.Name, cost, k.Limits...)
		rs = m.Results
	}
	ret := time.Since(c.start).Nanoseconds()
	if err != nil {
		return fmt.Errorf("client %d: %s cost %d at %s: %w", c.id, k.Name, cost, since(in.Now), err)
	}
	c.h = append(c.h, porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: Output{Results: rs}, Return: ret})
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
