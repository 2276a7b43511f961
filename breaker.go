package sluice

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Breaker configures the circuit breaker between a Limiter and its store.
// After Failures consecutive store calls fail (an error or the store
// timeout) over at least Span, with no call succeeding in between, the
// breaker opens: decisions go straight to the ErrorPolicy without touching
// the store, so that a hung Redis costs each request nothing rather than
// the store timeout. Span keeps a store that only partly fails (one
// Cluster master of three down, the connection of a few calls killed)
// from opening it for every key: its failures come in short runs between
// successes.
//
// Every Probe while it is open, a decision at cost 0 (which consumes
// nothing: the one that opened it, or one that arrives) goes to the store
// in the background as a probe; the breaker is half-open meanwhile, and
// decisions are answered by the policy. The first probe that succeeds
// closes the breaker, so that no client waits on a probe. It probes on its
// own, decisions or not, for a minute after the last decision it answered
// (so that a replica taken out of service while it was not ready comes
// back); after that, at the first decision. Only a probe closes it, and a
// call that began before the breaker last opened counts for nothing when
// it ends, so a store that fails and answers by turns opens and closes it
// once, not at every answer. A caller that gives up after waiting longer
// than Span counts as a failure: it saw the store slow.
//
// Under every ErrorPolicy but ReturnErrors a Limiter has a breaker with
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

// WithBreakerHandler registers f to be told when the breaker opens (with
// the failure that opened it) and when it closes again (with a nil
// error): once per change, not per decision, and not of the probes in
// between. Calls are never concurrent, in the order of the changes; f
// must not block.
func WithBreakerHandler(f func(state BreakerState, err error)) Option {
	return func(l *Limiter) { l.onBreaker = f }
}

// Breaker returns the state of the Limiter's circuit breaker; a Limiter
// without one is always BreakerClosed.
func (l *Limiter) Breaker() BreakerState {
	if l.breaker == nil {
		return BreakerClosed
	}
	return BreakerState(l.breaker.state.Load())
}

// breaker is the Limiter's circuit breaker. Its closed state costs a
// decision one atomic load, and a store that answers, nothing more.
type breaker struct {
	threshold   int32
	span, probe time.Duration
	start       time.Time // the zero of opened and firstFail, for a monotonic clock
	openErr     error     // the store error of the decisions it stops

	state     atomic.Uint32 // a BreakerState
	failures  atomic.Int32  // consecutive, while closed
	firstFail atomic.Int64  // when the run of failures began, since start
	opened    atomic.Int64  // when it opened or a probe failed, since start
	arrived   atomic.Int64  // when it last answered a decision, since start
	epoch     atomic.Uint64 // opens so far: a call that began in an earlier epoch cannot close it

	mu       sync.Mutex // orders the changes that are reported
	onChange func(BreakerState, error)
}

func newBreaker(b Breaker, onChange func(BreakerState, error)) *breaker {
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
	return &breaker{
		threshold: int32(min(b.Failures, 1<<30)), span: b.Span, probe: b.Probe, start: time.Now(), onChange: onChange,
		openErr: fmt.Errorf("%w after %d consecutive failures", ErrBreakerOpen, b.Failures),
	}
}

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
		if b.since(b.opened.Load()) < b.probe {
			return ticket{}, false
		}
		if b.state.CompareAndSwap(uint32(BreakerOpen), uint32(BreakerHalfOpen)) {
			return ticket{epoch: b.epoch.Load(), probe: true}, false
		}
	}
	return ticket{}, false
}

// now returns the time since b.start; since, the time since t, a value of
// now.
func (b *breaker) now() int64                  { return int64(time.Since(b.start)) }
func (b *breaker) since(t int64) time.Duration { return time.Duration(b.now() - t) }

// done reports the outcome of a call allow let through: nil, or the
// store's failure. It reports whether the call opened the breaker.
func (b *breaker) done(t ticket, err error) (opened bool) {
	if err == nil {
		if t.probe {
			b.change(BreakerClosed, nil)
		} else if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		return false
	}
	if t.probe {
		b.opened.Store(b.now())
		b.state.Store(uint32(BreakerOpen))
		return false
	}
	if t.epoch != b.epoch.Load() {
		return false
	}
	n := b.failures.Add(1)
	if n == 1 {
		b.firstFail.Store(b.now())
	}
	return n >= b.threshold && b.since(b.firstFail.Load()) >= b.span && b.change(BreakerOpen, err)
}

// change moves the breaker to state (open or closed) and reports it, unless
// another call did first; it returns whether it made the change.
func (b *breaker) change(state BreakerState, err error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := BreakerState(b.state.Load())
	switch {
	case state == BreakerOpen && cur == BreakerClosed:
		b.epoch.Add(1)
		b.opened.Store(b.now())
		b.arrived.Store(b.now())
	case state == BreakerClosed && cur == BreakerHalfOpen:
		b.failures.Store(0)
	default:
		return false
	}
	b.state.Store(uint32(state))
	if b.onChange != nil {
		b.onChange(state, err)
	}
	return true
}
