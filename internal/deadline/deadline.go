// Package deadline bounds a store call by a timeout that does not count
// the time the process could not run.
//
// A process starved of CPU (a loaded machine, a container throttled by
// its CPU quota, a SIGSTOP) runs nothing for a while: not the goroutine
// that reads a Redis reply, nor the timer of the call's deadline. When it
// runs again, Go's scheduler runs the timers that came due before it
// polls the network (which it does when it is idle, or every 10ms from
// sysmon), so the deadline of a call whose reply came during the stall
// fires first, and a healthy Redis is blamed for the process's own stall:
// the decision degrades, and a run of them opens the circuit breaker.
//
// A context of WithTimeout is done when its timeout has passed, unless
// its timer fired late: a timer that runs L after it was due says that the
// process did not run for L, in which a reply may have come unread. The
// deadline then moves to max(L, PollGap) after the timer ran, so that the
// network is polled before the call is given up, at most MaxMoves times.
// A timer that fires on time (less than MinLate late) ends the call: the
// process ran, and the reply did not come. So a hung Redis still fails a
// call at its timeout on a process that runs, and at most MaxMoves moves
// later on one that is starved.
package deadline

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// The rules of a moving deadline (see the package doc).
const (
	// MinLate is how late a timer must fire to move the deadline: later
	// than Go's timers fire on a busy process that runs.
	MinLate = time.Millisecond
	// PollGap is the least a deadline moves: sysmon's interval between
	// forced network polls, after which a reply that came while the
	// process was stopped has been read.
	PollGap = 10 * time.Millisecond
	// MaxMoves bounds how many times a deadline moves.
	MaxMoves = 3
)

// WithTimeout returns a copy of parent that is done d after now, or later
// when its timer fires late (see the package doc), or when parent is done,
// or when cancel is called. Its Err is context.DeadlineExceeded once its
// own deadline passed; Deadline reports the first deadline, now + d (or
// parent's, if earlier), which the clients that set socket deadlines from
// it (go-redis) keep. Call cancel as soon as the work is done.
func WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	inner, cancel := context.WithCancel(parent)
	now := time.Now()
	c := &timeoutCtx{Context: inner, cancel: cancel, deadline: now.Add(d)}
	c.due.Store(c.deadline.UnixNano())
	// Armed once c.timer is set: fire reads it.
	c.timer = time.AfterFunc(time.Duration(math.MaxInt64), c.fire)
	c.timer.Reset(d)
	return c, func() {
		c.timer.Stop()
		cancel()
	}
}

// WithDeadline is WithTimeout(parent, time.Until(t)).
func WithDeadline(parent context.Context, t time.Time) (context.Context, context.CancelFunc) {
	return WithTimeout(parent, time.Until(t))
}

// timeoutCtx is a context of WithTimeout: a cancelCtx (so that children
// made from it attach to it), canceled by its own timer.
type timeoutCtx struct {
	context.Context // context.WithCancel(parent)
	cancel          context.CancelFunc
	deadline        time.Time
	timer           *time.Timer
	due             atomic.Int64 // when the timer is due, Unix ns
	moves           atomic.Int32
	expired         atomic.Bool
}

// fire ends the context, or moves its deadline if the timer fired late.
func (c *timeoutCtx) fire() {
	now := time.Now()
	late := now.Sub(time.Unix(0, c.due.Load()))
	if late >= MinLate && c.moves.Add(1) <= MaxMoves {
		wait := max(late, PollGap)
		c.due.Store(now.Add(wait).UnixNano())
		c.timer.Reset(wait)
		return
	}
	if c.Context.Err() == nil { // not parent's end, nor cancel's
		c.expired.Store(true)
	}
	c.cancel()
}

// Deadline returns the first deadline, or parent's if it is earlier.
func (c *timeoutCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Err returns context.DeadlineExceeded once the context's own deadline
// passed, else parent's error or context.Canceled.
func (c *timeoutCtx) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired.Load() {
		return context.DeadlineExceeded
	}
	return err
}
