package sluice

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Breaker configures the circuit breakers between a Limiter and its
// store: one per node of a store that is a Noder (a Redis Cluster's
// masters), one in all otherwise. After Failures consecutive store calls
// on a node fail (an error or the store timeout) over at least Span, with
// no call on it succeeding in between, its breaker opens: the node's
// decisions go straight to the ErrorPolicy without touching the store, so
// that a hung Redis costs each request nothing rather than the store
// timeout, while the keys of the other nodes are still decided by the
// store. Span keeps a node that only partly fails (the connection of a few
// calls killed) from opening it: its failures come in short runs between
// successes. A request whose parts live on several nodes goes to the store
// only if the breaker of each lets it.
//
// Every Probe while a breaker is open, a decision at cost 0 (which
// consumes nothing: the one that opened it, or one that arrives, without
// the parts of other nodes) goes to the store in the background as a
// probe; the breaker is half-open meanwhile, and decisions are answered by
// the policy. The first probe that succeeds closes the breaker, so that no
// client waits on a probe. It probes on its own, decisions or not, for a
// minute after the last decision it answered (so that a replica taken out
// of service while it was not ready comes back); after that, at the first
// decision. Only a probe closes it, and a call that began before the
// breaker last opened counts for nothing when it ends, so a store that
// fails and answers by turns opens and closes it once, not at every
// answer. A caller that gives up after waiting longer than Span counts as
// a failure: it saw the store slow.
//
// Under every ErrorPolicy but ReturnErrors a Limiter has breakers with
// these defaults unless WithBreaker says otherwise.
type Breaker struct {
	// Failures is how many consecutive failed store calls open the
	// breaker: 0 means DefaultBreakerFailures, a negative number no
	// breaker.
	Failures int
	// Span is the least time the run of failures must last: 0 means
	// DefaultBreakerSpan.
	Span time.Duration
	// Probe is how long the breaker stays open before it probes the
	// store: 0 means DefaultBreakerProbe.
	Probe time.Duration
}

// The breaker's defaults. DefaultBreakerSpan is half the default store
// timeout, so that a hung store opens the breaker within about 1.5 store
// timeouts of hanging. DefaultBreakerProbe is short because a probe costs
// one background call of at most the store timeout, and because it bounds
// how long decisions stay degraded after the store comes back.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerSpan     = 50 * time.Millisecond
	DefaultBreakerProbe    = 50 * time.Millisecond
)

// ErrBreakerOpen is wrapped by the store error of a decision the Limiter
// did not send to the store because its breaker is open (see Breaker).
var ErrBreakerOpen = errors.New("circuit breaker open")

// BreakerState is the state of a Limiter's circuit breaker.
type BreakerState uint8

// The breaker's states.
const (
	// BreakerClosed: decisions go to the store.
	BreakerClosed BreakerState = iota
	// BreakerOpen: decisions go to the ErrorPolicy.
	BreakerOpen
	// BreakerHalfOpen: a probe is at the store; decisions go to the
	// ErrorPolicy.
	BreakerHalfOpen
)

var breakerStates = [...]string{BreakerClosed: "closed", BreakerOpen: "open", BreakerHalfOpen: "half_open"}

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	if int(s) < len(breakerStates) {
		return breakerStates[s]
	}
	return fmt.Sprintf("BreakerState(%d)", s)
}

// WithBreaker sets the Limiter's circuit breaker (see Breaker); a
// negative Failures turns it off. Without this option a Limiter has the
// default breaker under every ErrorPolicy but ReturnErrors.
func WithBreaker(b Breaker) Option {
	return func(l *Limiter) { l.breakerSet, l.breakerConf = true, b }
}

// NodeBreaker is the state of the circuit breaker of one node of a
// Limiter's store.
type NodeBreaker struct {
	// Node is the node, as its store's Noder numbers it: 0 for a store
	// that is no Noder.
	Node int
	// Name is the node's name as its store gives it (Noder.NodeName) at
	// the time of the report: "" for a store that is no Noder.
	Name string
	// State is the state of the node's breaker.
	State BreakerState
	// Err, in a change told to Hooks.Breaker, is the failure that opened
	// the breaker: nil when it closed, and in Breakers.
	Err error
}

// Breaker returns the state of the Limiter's circuit breakers, the worst
// of its nodes' (open, then half-open, then closed: one node failing is
// reason enough to look at Breakers); a Limiter without breakers is
// always BreakerClosed.
func (l *Limiter) Breaker() BreakerState {
	if l.breakers == nil {
		return BreakerClosed
	}
	worst := BreakerClosed
	for _, b := range *l.breakers.nodes.Load() {
		switch s := b.load(); {
		case s == BreakerOpen:
			return s
		case s == BreakerHalfOpen:
			worst = s
		}
	}
	return worst
}

// Breakers returns the state of the breaker of each node that the
// Limiter has decided on, by node: one, node 0, over a store that is no
// Noder; none without breakers.
func (l *Limiter) Breakers() []NodeBreaker {
	if l.breakers == nil {
		return nil
	}
	var out []NodeBreaker
	for _, b := range *l.breakers.nodes.Load() {
		if b != nil {
			out = append(out, NodeBreaker{Node: b.node, Name: l.breakers.nameOf(b.node), State: b.load()})
		}
	}
	return out
}

// breakers are a Limiter's circuit breakers, one per node of its store
// (one in all when it is no Noder), each made when its node is first
// decided on. They share their settings, clock and handler.
type breakers struct {
	threshold   int32
	span, probe time.Duration
	start       time.Time             // the zero of every breaker's times, for a monotonic clock
	name        func(node int) string // the store's NodeName; nil: it is no Noder
	onChange    func(NodeBreaker)

	mu    sync.Mutex                 // orders the changes reported; adds nodes
	nodes atomic.Pointer[[]*breaker] // by node, nil where not made yet; node 0's always made
}

func newBreakers(b Breaker, name func(int) string, onChange func(NodeBreaker)) *breakers {
	if b.Failures < 0 {
		return nil
	}
	if b.Failures == 0 {
		b.Failures = DefaultBreakerFailures
	}
	if b.Span <= 0 {
		b.Span = DefaultBreakerSpan
	}
	if b.Probe <= 0 {
		b.Probe = DefaultBreakerProbe
	}
	s := &breakers{
		threshold: int32(min(b.Failures, 1<<30)), span: b.Span, probe: b.Probe, start: time.Now(),
		name: name, onChange: onChange,
	}
	s.nodes.Store(&[]*breaker{s.newBreaker(0)})
	return s
}

func (s *breakers) newBreaker(node int) *breaker {
	b := &breaker{set: s, node: node}
	b.setOpenErr()
	return b
}

// get returns the breaker of node, making it if it is the node's first
// decision; a node out of range is node 0.
func (s *breakers) get(node int) *breaker {
	ns := *s.nodes.Load()
	if uint(node) < uint(len(ns)) {
		if b := ns[node]; b != nil {
			return b
		}
	}
	if uint(node) >= MaxNodes {
		return ns[0]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ns = *s.nodes.Load()
	if node < len(ns) && ns[node] != nil {
		return ns[node]
	}
	grown := make([]*breaker, max(len(ns), node+1))
	copy(grown, ns)
	grown[node] = s.newBreaker(node)
	s.nodes.Store(&grown)
	return grown[node]
}

// nameOf returns the store's name of node, or "" when it names none.
func (s *breakers) nameOf(node int) string {
	if s.name == nil {
		return ""
	}
	return s.name(node)
}

// now returns the time since s.start; since, the time since t, a value of
// now.
func (s *breakers) now() int64                  { return int64(time.Since(s.start)) }
func (s *breakers) since(t int64) time.Duration { return time.Duration(s.now() - t) }

// breaker is the circuit breaker of one node. Its closed state costs a
// decision one atomic load, and a store that answers, nothing more.
type breaker struct {
	set  *breakers
	node int

	state     atomic.Uint32         // a BreakerState
	failures  atomic.Int32          // consecutive, while closed
	firstFail atomic.Int64          // when the run of failures began, on set's clock
	opened    atomic.Int64          // when it opened or a probe failed, on set's clock
	arrived   atomic.Int64          // when it last answered a decision, on set's clock
	epoch     atomic.Uint64         // opens so far: a call that began in an earlier epoch cannot close it
	openErr   atomic.Pointer[error] // the store error of the decisions it stops
}

// load returns the breaker's state; nil's is BreakerClosed.
func (b *breaker) load() BreakerState {
	if b == nil {
		return BreakerClosed
	}
	return BreakerState(b.state.Load())
}

// setOpenErr sets the error of the decisions the breaker stops, naming
// its node as the store names it now.
func (b *breaker) setOpenErr() {
	var err error
	if name := b.set.nameOf(b.node); name != "" {
		err = fmt.Errorf("%w for node %s after %d consecutive failures", ErrBreakerOpen, name, b.set.threshold)
	} else {
		err = fmt.Errorf("%w after %d consecutive failures", ErrBreakerOpen, b.set.threshold)
	}
	b.openErr.Store(&err)
}

// refusal returns the error of the decisions the breaker stops.
func (b *breaker) refusal() error { return *b.openErr.Load() }

// ticket is what a call that the breaker let through must hand back to
// done.
type ticket struct {
	epoch uint64
	probe bool
}

// allow reports whether a decision may go to the store and, if so, the
// ticket its outcome is reported with. A decision that may not, but whose
// ticket is a probe's, is to send a probe to the store.
func (b *breaker) allow() (ticket, bool) {
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return ticket{epoch: b.epoch.Load()}, true
	case BreakerOpen:
		if b.set.since(b.opened.Load()) < b.set.probe {
			return ticket{}, false
		}
		if b.state.CompareAndSwap(uint32(BreakerOpen), uint32(BreakerHalfOpen)) {
			return ticket{epoch: b.epoch.Load(), probe: true}, false
		}
	}
	return ticket{}, false
}

// done reports the outcome of a call allow let through: nil, or the
// store's failure. It reports whether the call opened the breaker.
func (b *breaker) done(t ticket, err error) (opened bool) {
	s := b.set
	if err == nil {
		if t.probe {
			b.change(BreakerClosed, nil)
		} else if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		return false
	}
	if t.probe {
		b.opened.Store(s.now())
		b.state.Store(uint32(BreakerOpen))
		return false
	}
	if t.epoch != b.epoch.Load() {
		return false
	}
	n := b.failures.Add(1)
	if n == 1 {
		b.firstFail.Store(s.now())
	}
	return n >= s.threshold && s.since(b.firstFail.Load()) >= s.span && b.change(BreakerOpen, err)
}

// change moves the breaker to state (open or closed) and reports it, unless
// another call did first; it returns whether it made the change.
func (b *breaker) change(state BreakerState, err error) bool {
	s := b.set
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := BreakerState(b.state.Load())
	switch {
	case state == BreakerOpen && cur == BreakerClosed:
		b.setOpenErr()
		b.epoch.Add(1)
		b.opened.Store(s.now())
		b.arrived.Store(s.now())
	case state == BreakerClosed && cur == BreakerHalfOpen:
		b.failures.Store(0)
	default:
		return false
	}
	b.state.Store(uint32(state))
	if s.onChange != nil {
		s.onChange(NodeBreaker{Node: b.node, Name: s.nameOf(b.node), State: state, Err: err})
	}
	return true
}
