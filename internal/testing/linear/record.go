package linear

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/storetest"
)

// Epoch is where every key's fake clock starts: storetest's, aligned to
// whole days, so that windows start at round offsets from it.
var Epoch = storetest.Epoch

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
	// Fault, if set, is called before each round r begins, while every
	// client waits, so that a test can add or remove a network fault
	// between rounds; and a decision that returns an error is then
	// recorded as indeterminate (see "Faults") instead of failing the
	// run. A client whose decision failed sends no more in that round.
	Fault func(round int)
}

// History is a recorded run: one porcupine.Operation per decision, its
// Input an Input and its Output an Output, Call and Return in ns since
// the run started (monotonic). An indeterminate decision (Output.Err)
// returns at Never, and is the only operation of its ClientId, after
// those of the clients: the view draws it on a row of its own.
type History []porcupine.Operation

// Never is the Return of an indeterminate decision: porcupine may place
// it at any point after its Call, as late as after every other decision.
const Never = int64(math.MaxInt64)

// Record runs r and returns its history. Without r.Fault, any store
// error fails t; with it, a decision that failed is recorded as
// indeterminate, and a key with more than MaxIndeterminate of them fails
// t (see "Faults"). A run that lasted longer than Margin fails t too.
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
	sc.open(r.Fault) // on t's goroutine: Fault may fail t
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("linear: %v", err)
	}
	if took := time.Since(start); took > Margin {
		// Not a bound on speed: past Margin a Redis server may have
		// expired state that the fake clock still needed, and no verdict
		// on the history would be sound.
		t.Fatalf("linear: the run took %v, more than Margin (%v): its history cannot be judged", took, Margin)
	}
	h := slices.Concat(hs...)
	if err := bounded(h); err != nil {
		t.Fatalf("linear: %v", err)
	}
	return h
}

// MaxIndeterminate bounds the indeterminate decisions of one key in a
// recorded history. Each of them may take effect at any point after its
// call, or never, which porcupine must try: the search grows with their
// number and with the decisions on the key (RELIABILITY.md,
// "Linearizability", measures it). Since a client sends no more in a
// round after a failed decision, a run whose clients in all, times its
// rounds with a fault, are at most MaxIndeterminate stays within it.
const MaxIndeterminate = 24

// bounded reports a key of h with more than MaxIndeterminate
// indeterminate decisions, and gives each indeterminate decision a
// ClientId of its own, after every client's.
func bounded(h History) error {
	next := 0
	for _, op := range h {
		next = max(next, op.ClientId+1)
	}
	count := map[string]int{}
	for i := range h {
		if h[i].Output.(Output).Err == "" {
			continue
		}
		h[i].ClientId, next = next, next+1
		k := h[i].Input.(Input).Key
		if count[k]++; count[k] > MaxIndeterminate {
			return fmt.Errorf("key %q: more than %d indeterminate decisions: porcupine may not decide it in time; run fewer clients, or fewer rounds with a fault", k, MaxIndeterminate)
		}
	}
	return nil
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
			if err := l.Validate(); err != nil {
				return fmt.Errorf("key %q: %w", k.Name, err)
			}
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

// schedule is a run's clock and its rounds' barriers.
type schedule struct {
	bases []time.Time      // each round's instant
	count [][]atomic.Int64 // decisions so far, by round and key
	ended []sync.WaitGroup // by round: done by each client as it ends it
	begun []chan struct{}  // by round: closed when it may begin (open)
	index map[string]int   // of each key in Keys
}

func newSchedule(r Run, clients int) *schedule {
	sc := &schedule{bases: roundBases(r), count: make([][]atomic.Int64, r.Rounds), ended: make([]sync.WaitGroup, r.Rounds),
		begun: make([]chan struct{}, r.Rounds), index: map[string]int{}}
	for i := range sc.count {
		sc.count[i] = make([]atomic.Int64, len(r.Keys))
		sc.ended[i].Add(clients)
		sc.begun[i] = make(chan struct{})
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

// open lets each round begin once every client ended the one before,
// calling fault (unless nil) before each. Should fault stop its
// goroutine (t.Fatal), the rounds left begin at once, so that the
// clients end.
func (sc *schedule) open(fault func(round int)) {
	r := 0
	defer func() {
		for ; r < len(sc.begun); r++ {
			close(sc.begun[r])
		}
	}()
	for ; r < len(sc.begun); r++ {
		if r > 0 {
			sc.ended[r-1].Wait()
		}
		if fault != nil {
			fault(r)
		}
		close(sc.begun[r])
	}
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
// that the other clients are not kept waiting; after an indeterminate
// decision it sends no more in that round.
func (c *client) play() (History, error) {
	rng := rand.New(rand.NewPCG(c.run.Seed, uint64(c.id)))
	var err error
	for round := range c.run.Rounds {
		<-c.sched.begun[round]
		failed := false
		for range c.run.PerRound {
			k := c.run.Keys[rng.IntN(len(c.run.Keys))]
			cost := 1 + rng.IntN(MaxCost)
			if err == nil && !failed {
				failed, err = c.decide(round, k, cost)
			}
		}
		c.sched.ended[round].Done()
	}
	return c.h, err
}

// decide sends one decision and records it: AllowN for a key of one
// limit (a store's OneTaker, where it has one), AllowAll for several.
// It reports a decision that failed and was recorded as indeterminate
// (with Run.Fault), or returns the error.
func (c *client) decide(round int, k Key, cost int) (failed bool, _ error) {
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
	switch {
	case err != nil && c.run.Fault == nil:
		return false, fmt.Errorf("client %d: %s cost %d at %s: %w", c.id, k.Name, cost, since(in.Now), err)
	case err != nil:
		c.h = append(c.h, porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: Output{Err: err.Error()}, Return: Never})
		return true, nil
	}
	c.h = append(c.h, porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: Output{Results: rs}, Return: ret})
	return false, nil
}
