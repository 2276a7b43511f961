package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/deadline"
)

// The coalescer implements "Coalescing" in the package doc (redis.go).

// DefaultBatch is the most decisions one batch script call carries unless
// WithBatch says otherwise (see "Coalescing"): Redis CPU per decision is at its floor from
// about 64 (BenchmarkBatchScriptCPU: 64, 128 and 256 within the noise of
// one another), and a call of 128 one-limit decisions stays under a
// millisecond of Redis time, so that a full batch does not hold the
// server long.
const DefaultBatch = 128

// maxInFlight is how many script calls of one lane may be in flight at
// once before arriving decisions wait to be batched. 4: up to 4 concurrent
// callers decide exactly as without coalescing (BenchmarkCoalesce/4: one
// call per decision), while at 256 callers the batches (about 40
// decisions) cost Redis within the noise of those that 1 or 2 calls in
// flight make (about 75 and 125), and several batches in flight let the
// client build and parse some while Redis runs another.
const maxInFlight = 4

// queueShare bounds how long a decision with a deadline waits in its
// lane's queue for a call in flight to return: 1/queueShare of the time it
// had left when it arrived. Then the queue goes as a batch call of its
// own, beyond maxInFlight. A queued decision would otherwise wait a round
// trip for a call to return and then one for its own: with Redis 50ms
// away (another region) and the default store deadline of 100ms, most
// queued decisions missed their deadline although every call took 50ms.
// With the default deadline the wait is at most 10ms, which a call to a
// healthy Redis nearby never takes (so batches form as before); a decision
// without a deadline waits for a call to return, however long.
const queueShare = 10

// WithBatch sets the most decisions that one script call may carry when
// the store coalesces concurrent decisions (default 128; see
// "Coalescing"): max 1 turns coalescing off, so that every decision is one
// script call of its own, as before coalescing. It panics if max is below
// 1.
func WithBatch(max int) Option {
	if max < 1 {
		panic(fmt.Sprintf("redis store: WithBatch: max %d, want at least 1", max))
	}
	return func(s *Store) { s.batch = max }
}

// batchScripts holds the batch script of each algorithm, by its algo.Code
// as algScripts does; batchAll serves a batch that mixes algorithms.
var (
	batchScripts = byAlgorithm("batch")
	batchAll     = compose("batch", algorithms...)
)

// coalescer batches a Store's concurrent single-group decisions, lane by
// lane.
type coalescer struct {
	s     *Store
	max   int
	lanes []atomic.Pointer[lane] // one, or one per Cluster slot, made when first used

	// For tests: batch calls sent (of 2 decisions or more), the decisions
	// they carried and the most in one; settle batch calls (of 2 settles
	// or more); and batch calls of decisions that carried refunds.
	batches, decisions, largest atomic.Int64
	settleBatches, mixed        atomic.Int64
}

// lane is the queue of decisions waiting for one set of keys.
type lane struct {
	mu    sync.Mutex
	busy  int     // script calls in flight
	queue []*call // waiting, in arrival order
	// flushAt is the earliest flushAt of the queued calls (zero: none has
	// one; earlier, once that call left the queue), when timer, made for
	// the first, sends the queue (flush).
	flushAt time.Time
	timer   *time.Timer
}

// call is one decision in a lane's queue, or one refund or charge (a
// settle: sc is its script, tails its limits' arguments).
type call struct {
	ctx   context.Context
	now   string
	g     *group         // &gv
	gv    group          // a copy of the caller's group, which stays its own
	sc    *script        // nil: a decision
	tails []string       // a settle's, of g's limits (see "Settle arguments")
	lims  []sluice.Limit // the call's copy of g.limits, kept when recycled
	state callState      // under the lane's mu
	done  chan struct{}  // buffered: receives once t and err are set
	t     taken
	err   error
	// flushAt is when it stops waiting for a call in flight to return
	// (queueShare); zero without a deadline.
	flushAt time.Time
}

// calls recycles the calls whose callers took their answer or left the
// queue, so that a queued decision allocates neither its call, nor its
// channel, nor its copy of the limits. A call whose caller left after it
// was sent is not recycled: its sender still answers it.
var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// answer tells cl's caller that cl.t and cl.err are set.
func (cl *call) answer() { cl.done <- struct{}{} }

// free recycles cl, whose answer its caller took, or which no sender holds.
func (cl *call) free() {
	clear(cl.lims)
	*cl = call{done: cl.done, lims: cl.lims[:0]}
	calls.Put(cl)
}

type callState uint8

const (
	queued  callState = iota
	sent              // in a batch: it may be taken
	dropped           // its context ended before its batch was sent: not taken
)

// newCoalescer returns the coalescer of s, or nil when s does not
// coalesce: a batch of 1, or a store sharded on the client side.
func newCoalescer(s *Store) *coalescer {
	var n int
	switch {
	case s.batch <= 1:
		return nil
	case s.split == unsplit:
		n = 1
	case s.split == bySlot:
		n = 16384
	default:
		return nil
	}
	return &coalescer{s: s, max: s.batch, lanes: make([]atomic.Pointer[lane], n)}
}

// laneOf returns the lane of g's keys, all in one slot.
func (c *coalescer) laneOf(g *group) *lane {
	i := 0
	if len(c.lanes) > 1 {
		i = slot(g.keys[0])
	}
	p := &c.lanes[i]
	if l := p.Load(); l != nil {
		return l
	}
	p.CompareAndSwap(nil, new(lane))
	return p.Load()
}

// take decides g at now (clockArg) as Store.take does, in a batch when
// other decisions of its lane are in flight.
func (c *coalescer) take(ctx context.Context, now string, g *group) (taken, error) {
	return c.do(ctx, now, g, nil, nil)
}

// settle runs the refund or charge script sc over g at now, tails its
// limits' arguments, as Store.runSettle does, in one
// call with the other settles by sc at now of its lane when calls are in
// flight: refund.lua and charge.lua decide nothing, key after key, so
// settles concatenate into one run.
func (c *coalescer) settle(ctx context.Context, sc *script, now string, g *group, tails []string) ([]sluice.Result, error) {
	t, err := c.do(ctx, now, g, sc, tails)
	return t.results, err
}

// direct runs the decision (sc nil) or settle of g alone.
func (c *coalescer) direct(ctx context.Context, now string, g *group, sc *script, tails []string) (taken, error) {
	if sc == nil {
		return c.s.take(ctx, now, g, false)
	}
	rs, err := c.s.runSettle(ctx, *sc, now, g, tails)
	return taken{results: rs}, err
}

// do decides or settles g (see take and settle), in a batch when other
// calls of its lane are in flight.
func (c *coalescer) do(ctx context.Context, now string, g *group, sc *script, tails []string) (taken, error) {
	l := c.laneOf(g)
	l.mu.Lock()
	if l.busy < maxInFlight {
		l.busy++
		l.mu.Unlock()
		// Deferred, so that a panic in the call (a Client's) still ends it:
		// the lane would otherwise count it in flight for good.
		defer func() {
			if b := c.next(l); b != nil {
				go c.run(l, b)
			}
		}()
		return c.direct(ctx, now, g, sc, tails)
	}
	cl := calls.Get().(*call)
	// The caller may leave (its context ending) once its call is sent,
	// and then reuse its Limits (the Limiter pools them): the sender reads
	// a copy, in the call's own buffer (recycled with it, so that a
	// queued decision does not allocate one), and a copy of g, so that
	// the caller's g stays its own (on its stack, most).
	cl.lims = append(cl.lims[:0], g.limits...)
	cl.gv = *g
	cl.gv.limits = cl.lims
	cl.ctx, cl.now, cl.g, cl.sc, cl.tails = ctx, now, &cl.gv, sc, tails
	l.queue = append(l.queue, cl)
	if dl, ok := ctx.Deadline(); ok {
		at := time.Now()
		cl.flushAt = at.Add(dl.Sub(at) / queueShare)
		c.arm(l, cl.flushAt)
	}
	l.mu.Unlock()
	select {
	case <-cl.done:
		return cl.taken()
	case <-ctx.Done():
	}
	select {
	case <-cl.done: // answered meanwhile: the answer stands
		return cl.taken()
	default:
	}
	l.mu.Lock()
	st := cl.state
	if st == queued {
		// Not sent: it leaves the queue and is not taken.
		if i := slices.Index(l.queue, cl); i >= 0 {
			l.queue = slices.Delete(l.queue, i, i+1)
		}
	}
	l.mu.Unlock()
	if st != sent {
		cl.free()
	}
	return taken{}, ctx.Err()
}

// taken returns cl's answer and recycles cl.
func (cl *call) taken() (taken, error) {
	t, err := cl.t, cl.err
	cl.free()
	return t, err
}

// arm makes l's timer fire at at, unless it fires earlier; l.mu is held.
func (c *coalescer) arm(l *lane, at time.Time) {
	if !l.flushAt.IsZero() && !at.Before(l.flushAt) {
		return
	}
	l.flushAt = at
	if l.timer == nil {
		l.timer = time.AfterFunc(time.Until(at), func() { c.flush(l) })
		return
	}
	l.timer.Reset(time.Until(at))
}

// flush sends l's queue as a batch call of its own, beyond maxInFlight,
// once its earliest flushAt has come: no call in flight returned in time.
func (c *coalescer) flush(l *lane) {
	l.mu.Lock()
	if l.flushAt.IsZero() || len(l.queue) == 0 {
		l.mu.Unlock()
		return
	}
	if wait := time.Until(l.flushAt); wait > 0 {
		l.timer.Reset(wait) // an earlier arming's firing
		l.mu.Unlock()
		return
	}
	l.busy++
	b := c.dequeue(l)
	l.mu.Unlock()
	c.run(l, b)
}

// next ends a script call of l: it returns the next batch of l's queue
// for the caller to send, the call staying in flight, or nil when nobody
// waits.
func (c *coalescer) next(l *lane) []*call {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) == 0 {
		l.busy--
		return nil
	}
	return c.dequeue(l)
}

// dequeue takes the next batch off l's queue, which is not empty, and
// arms l's timer for the rest; l.mu is held.
func (c *coalescer) dequeue(l *lane) []*call {
	n := min(len(l.queue), c.max)
	b := make([]*call, 0, n)
	for _, cl := range l.queue[:n] {
		if cl.ctx.Err() != nil {
			cl.state = dropped // its caller returns the context's error
			continue
		}
		cl.state = sent
		b = append(b, cl)
	}
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	var at time.Time
	for _, cl := range l.queue {
		if !cl.flushAt.IsZero() && (at.IsZero() || cl.flushAt.Before(at)) {
			at = cl.flushAt
		}
	}
	l.flushAt = time.Time{}
	switch {
	case !at.IsZero():
		c.arm(l, at)
	case l.timer != nil:
		l.timer.Stop()
	}
	return b
}

// run sends batch b of l and the batches that queue behind it, until
// nobody waits.
func (c *coalescer) run(l *lane, b []*call) {
	for ; b != nil; b = c.next(l) {
		c.send(b)
	}
}

// send runs the calls of b, the decisions in one script call and the
// settles in one per script and now, and answers each; the refunds of one
// now go in the decisions' call (refund_first.lua), as one script call.
// The script calls go at once (the client pipelines them on its
// connection), so that a batch costs one round trip, not one per call:
// its calls were all waiting at once, so that no order among them is
// owed.
func (c *coalescer) send(b []*call) {
	takes := b
	var with []*call // refunds sent with the decisions
	if slices.ContainsFunc(b, func(cl *call) bool { return cl.sc != nil }) {
		takes = nil
		type kind struct {
			sc  *script
			now string
		}
		var order []kind
		settles := map[kind][]*call{}
		for _, cl := range b {
			if cl.sc == nil {
				takes = append(takes, cl)
				continue
			}
			k := kind{cl.sc, cl.now}
			if _, ok := settles[k]; !ok {
				order = append(order, k)
			}
			settles[k] = append(settles[k], cl)
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		for i, k := range order {
			switch {
			case with == nil && k.sc == &refundScript && len(takes) > 0 && c.s.wait.replicas == 0:
				with = settles[k]
			case i == len(order)-1 && len(takes) == 0:
				c.sendSettles(settles[k]) // the last call: here
			default:
				wg.Go(func() { c.sendSettles(settles[k]) })
			}
		}
	}
	c.sendTakes(takes, with)
}

// sendTakes decides the decisions of b, and gives back the refunds of
// with (of one now; none when b holds no decision), in one script call,
// and answers each.
func (c *coalescer) sendTakes(b, with []*call) {
	switch {
	case len(b) == 0:
		return
	case len(b) == 1 && len(with) == 0:
		cl := b[0]
		cl.t, cl.err = c.s.take(cl.ctx, cl.now, cl.g, false)
		cl.answer()
		return
	}
	ctx, cancel := batchContext(append(b[:len(b):len(b)], with...))
	defer cancel()
	ts, err := c.s.takeBatch(ctx, b, with)
	if errors.Is(err, ErrTryAgain) {
		// A Cluster refused the batch (not run) during a migration: each
		// decision goes again by itself, and follows ASK or retries, and
		// the refunds go as a settle batch.
		var wg sync.WaitGroup
		for _, cl := range b {
			wg.Go(func() {
				cl.t, cl.err = c.s.take(ctx, cl.now, cl.g, false)
				cl.answer()
			})
		}
		if len(with) > 0 {
			wg.Go(func() { c.sendSettles(with) })
		}
		wg.Wait()
		return
	}
	c.batches.Add(1)
	c.decisions.Add(int64(len(b)))
	for n := c.largest.Load(); int64(len(b)) > n; n = c.largest.Load() {
		if c.largest.CompareAndSwap(n, int64(len(b))) {
			break
		}
	}
	if len(with) > 0 {
		c.mixed.Add(1)
	}
	if len(with) > 1 {
		c.settleBatches.Add(1)
	}
	for i, cl := range append(b[:len(b):len(b)], with...) {
		if err != nil {
			cl.err = err
		} else {
			cl.t, cl.err = ts[i], ts[i].err
		}
		cl.answer()
	}
}

// sendSettles runs the settles of b, of one script and now, in one
// call, and answers each. Like a batch of decisions, a settle batch that a
// Cluster refuses during a migration goes again settle by settle.
func (c *coalescer) sendSettles(b []*call) {
	if len(b) == 1 {
		cl := b[0]
		cl.t, cl.err = c.direct(cl.ctx, cl.now, cl.g, cl.sc, cl.tails)
		cl.answer()
		return
	}
	ctx, cancel := batchContext(b)
	defer cancel()
	n := 0
	for _, cl := range b {
		n += len(cl.g.limits)
	}
	keys := make([]string, 0, n)
	r := runs{args: make([]string, 1, 1+4+len(b[0].tails)*len(b))} // about: now, a run, each one's tails
	r.args[0] = b[0].now
	for _, cl := range b {
		keys = append(keys, cl.g.keys...)
		r.add(cl.g, cl.tails)
	}
	r.end()
	reply, err := c.s.eval(ctx, *b[0].sc, keys, r.args)
	if errors.Is(err, ErrTryAgain) {
		var wg sync.WaitGroup
		for _, cl := range b {
			wg.Go(func() {
				cl.t, cl.err = c.direct(ctx, cl.now, cl.g, cl.sc, cl.tails)
				cl.answer()
			})
		}
		wg.Wait()
		return
	}
	if err == nil && len(reply) != 4*n {
		err = fmt.Errorf("settle script replied %d integers to a batch of %d limits, want %d", len(reply), n, 4*n)
	}
	c.settleBatches.Add(1)
	off := 0
	for _, cl := range b {
		if err != nil {
			cl.err = err
		} else {
			k := 4 * len(cl.g.limits)
			cl.t.results, cl.err = results(cl.g.limits, reply[off:off+k], 0)
			off += k
		}
		cl.answer()
	}
}

// batchContext returns the context of a batch call: without the
// cancellation of any one caller, whose end must not fail the others,
// and with the latest of their deadlines, or none when one has none; a
// deadline that, as the Limiter's store timeout, does not count the time
// the process could not run (internal/deadline).
func batchContext(b []*call) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, cl := range b {
		d, ok := cl.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(b[0].ctx), func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return deadline.WithDeadline(context.WithoutCancel(b[0].ctx), last)
}

// takeBatch runs batch.lua over the groups of b, in order, and returns
// what each took; with refunds (with, of one now), it runs refund_first.lua
// and batch.lua in one call, and returns the decisions' then the
// refunds'.
func (s *Store) takeBatch(ctx context.Context, b, with []*call) ([]taken, error) {
	sc, keys, args := batchArgs(b)
	nw := 0 // the refunds' limits
	if len(with) > 0 {
		// ARGV: the refunds' now, the number of their runs' arguments,
		// their runs, then the decisions'.
		r := runs{args: make([]string, 2, 2+4+len(with[0].tails)*len(with)+len(args))}
		r.args[0] = with[0].now
		var wkeys []string
		for _, cl := range with {
			wkeys = append(wkeys, cl.g.keys...)
			r.add(cl.g, cl.tails)
			nw += len(cl.g.limits)
		}
		r.end()
		r.args[1] = strconv.Itoa(len(r.args) - 2)
		sc, keys, args = refundBatch, append(wkeys, keys...), append(r.args, args...)
	}
	// eval, not run: a batch that a Cluster refuses is split (send), not
	// retried whole. One WAIT after the batch covers every write in it.
	var reply []int64
	var acked int64
	var err error
	wait := s.wait.replicas > 0 && slices.ContainsFunc(b, func(cl *call) bool { return cl.g.consumes() })
	if wait {
		reply, acked, err = s.evalWait(ctx, sc, keys, args)
	} else {
		reply, err = s.eval(ctx, sc, keys, args)
	}
	if err != nil {
		return nil, err
	}
	if len(reply) < 4*nw {
		return nil, fmt.Errorf("batch script replied %d integers to %d refunds, want more", len(reply), nw)
	}
	ts := make([]taken, len(b), len(b)+len(with))
	off := 4 * nw
	for i, cl := range b {
		n := 4*len(cl.g.limits) + 1
		if off+n > len(reply) {
			return nil, fmt.Errorf("batch script replied %d integers, want more", len(reply))
		}
		rs, err := results(cl.g.limits, reply[off:off+n], 1)
		if err != nil {
			return nil, err
		}
		ts[i] = taken{results: rs, now: reply[off+n-1]}
		if wait {
			ts[i].err = s.replicated(cl.g, ts[i], acked)
		}
		off += n
	}
	if off != len(reply) {
		return nil, fmt.Errorf("batch script replied %d integers, want %d", len(reply), off)
	}
	off = 0
	for _, cl := range with {
		k := 4 * len(cl.g.limits)
		rs, err := results(cl.g.limits, reply[off:off+k], 0)
		if err != nil {
			return nil, err
		}
		ts = append(ts, taken{results: rs})
		off += k
	}
	return ts, nil
}

// Batch arguments. The general form (batch.lua) sends six strings per
// one-limit request: its now, its number of limits and its limit's code,
// two parameters and cost, each one a bulk string Redis parses and turns
// into a Lua string, and most of them a tonumber. A batch of one-limit
// requests, the common case, goes in the compact form instead: the
// distinct limits of the batch once, then one integer per request (and
// its now, when it has its own).

// maxCompactLimits is the most distinct limits a compact batch carries:
// the client finds a request's limit among them by a linear search.
const maxCompactLimits = 16

// maxCompactCost bounds the costs of a compact batch, so that a request's
// integer r = cost * L + index stays below 2^37 and batch.lua's r % L is
// exact in Lua's numbers: r / L = cost + index / L, at least 1/16 below
// cost + 1 where a double's spacing is at most 2^-20, never rounds up to
// cost + 1.
const maxCompactCost = 1<<32 - 1

// batchArgs returns the script, keys and arguments of a batch call over
// the groups of b: in the compact form when every group has one limit,
// none a Concurrency limit (whose cost argument is a slot), there are at
// most maxCompactLimits distinct limits and no cost exceeds
// maxCompactCost, in the general form otherwise.
func batchArgs(b []*call) (script, []string, []string) {
	code, mixed := algo.Code(b[0].g.limits[0].Algorithm), false
	pick := func() script {
		if mixed {
			return batchAll
		}
		return batchScripts[code]
	}
	keys := make([]string, 0, len(b))
	type limit struct {
		code   string
		p1, p2 int64
	}
	var (
		distinct [maxCompactLimits]limit
		nl       int
		idx      = make([]int, len(b)) // the limit of each request
	)
	compact := true
	for i, cl := range b {
		g := cl.g
		if len(g.limits) != 1 || g.costOf(0) < 0 || int64(g.costOf(0)) > maxCompactCost || g.limits[0].Algorithm == sluice.Concurrency {
			compact = false
			break
		}
		l := g.limits[0]
		p1, p2 := algo.Params(l)
		d := limit{algo.Code(l.Algorithm), p1, p2}
		mixed = mixed || d.code != code
		j := slices.Index(distinct[:nl], d)
		if j < 0 {
			if nl == maxCompactLimits {
				compact = false
				break
			}
			distinct[nl] = d
			j = nl
			nl++
		}
		idx[i] = j
		keys = append(keys, g.keys[0])
	}
	if compact {
		// ARGV[1] is -L, the number of distinct limits, negated; then each
		// limit's code and two parameters; then, per request, cost * L +
		// index (0-based), or -(cost * L + index) - 1 followed by its now
		// when it has a now of its own.
		args := make([]string, 1, 1+3*nl+len(b))
		args[0] = strconv.Itoa(-nl)
		for _, d := range distinct[:nl] {
			args = append(args, d.code, strconv.FormatInt(d.p1, 10), strconv.FormatInt(d.p2, 10))
		}
		for i, cl := range b {
			r := int64(cl.g.costOf(0))*int64(nl) + int64(idx[i])
			if cl.now == "" {
				args = append(args, strconv.FormatInt(r, 10))
			} else {
				args = append(args, strconv.FormatInt(-r-1, 10), cl.now)
			}
		}
		return pick(), keys, args
	}
	nk := 0
	for _, cl := range b {
		nk += len(cl.g.limits)
	}
	keys = make([]string, 0, nk)
	args := make([]string, 1, 1+2*len(b)+4*nk)
	args[0] = strconv.Itoa(len(b))
	mixed = false
	for _, cl := range b {
		g := cl.g
		keys = append(keys, g.keys...)
		args = append(args, cl.now, strconv.Itoa(len(g.limits)))
		for i, l := range g.limits {
			args = appendParams(args, l, g.costArg(i, g.costOf(i)))
			mixed = mixed || algo.Code(l.Algorithm) != code
		}
	}
	return pick(), keys, args
}
