package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The decision pipeline: every decision, whatever asked it (AllowN,
// AllowParts, Reserve), goes the same way: the deny cache (take), the
// breakers of its nodes (decide), one store call within the store timeout
// told to the hooks (ask), and the error policy when the store fails or a
// breaker is open (answer).

// callOp is the store call of a decision.
type callOp uint8

const (
	opTake    callOp = iota // Store.Take of req
	opTakeOne               // OneTaker.TakeOne of key, limit, n: no Request unless it fails
	opTakeAt                // Store.TakeAt of req, for a reservation
)

// call is one decision going through the pipeline: what it asks, and
// what it got. A call of opTakeOne lives on its caller's stack, so that
// Allow allocates nothing.
type call struct {
	op    callOp
	req   Request // opTake and opTakeAt
	key   string  // opTakeOne's request
	limit Limit
	n     int
	now   time.Time

	rs    []Result // opTake's and opTakeAt's answer
	r     Result   // opTakeOne's
	at    []time.Time
	local []Part // the parts the local fallback decided (opTakeAt)
}

// request returns the Request of c (built for opTakeOne, whose store
// call needs none).
func (c *call) request() Request {
	if c.op == opTakeOne {
		return Request{Parts: []Part{{Key: c.key, Limits: []Limit{c.limit}, Cost: c.n}}, Now: c.now}
	}
	return c.req
}

// takeParts decides parts, which are validated here, through the
// pipeline.
func (l *Limiter) takeParts(ctx context.Context, parts []Part) ([]Result, error) {
	if err := validate(parts); err != nil {
		return nil, err
	}
	c := l.partsCall(opTake, parts)
	if err := l.take(ctx, &c); err != nil {
		return nil, err
	}
	return c.rs, nil
}

// partsCall is the call of op deciding parts, at the Limiter's clock
// (the zero Now: the store's), with a new slot when a part holds one.
func (l *Limiter) partsCall(op callOp, parts []Part) call {
	c := call{op: op, req: Request{Parts: parts, Slot: slotFor(parts)}}
	if l.now != nil {
		c.req.Now = l.now()
	}
	c.now = c.req.Now
	return c
}

// take decides c, from the deny cache when it holds a denial of c's
// request (one part of one limit, of cost 1), through decide otherwise.
func (l *Limiter) take(ctx context.Context, c *call) error {
	key, limit, ok := c.cacheable()
	if l.deny == nil || !ok {
		return l.decide(ctx, c)
	}
	// t0 is taken before the store is asked: no later than its decision.
	t0 := c.now
	if t0.IsZero() {
		t0 = time.Now()
	}
	r, resets, ok := l.deny.answer(key, limit, t0)
	if ok {
		c.set([]Result{r}, r)
		return nil
	}
	if err := l.decide(ctx, c); err != nil {
		return err
	}
	l.deny.keep(key, limit, c.first(), t0, resets)
	return nil
}

// cacheable returns the key and limit of c if the deny cache may answer
// it.
func (c *call) cacheable() (string, Limit, bool) {
	switch c.op {
	case opTakeOne:
		return c.key, c.limit, c.n == 1
	case opTake:
		if cacheable(c.req.Parts) {
			return c.req.Parts[0].Key, c.req.Parts[0].Limits[0], true
		}
	}
	return "", Limit{}, false
}

// first returns the first Result of c's answer.
func (c *call) first() Result {
	if c.op == opTakeOne {
		return c.r
	}
	return c.rs[0]
}

// set records rs as c's answer (r, rs[0], for opTakeOne).
func (c *call) set(rs []Result, r Result) {
	if c.op == opTakeOne {
		c.r = r
		return
	}
	c.rs = rs
}

// decide asks the store for c, through the breakers of its nodes, and
// the error policy when the store fails or a breaker is open. An error
// wrapping errors.ErrUnsupported (a store that cannot TakeAt) is the
// caller's: neither the breakers nor the policy see it.
func (l *Limiter) decide(ctx context.Context, c *call) error {
	var g gate
	if l.breaker != nil {
		key, rest := c.key, []Part(nil)
		if c.op != opTakeOne {
			key, rest = c.req.Parts[0].Key, c.req.Parts[1:]
		}
		if !l.enter(&g, key, rest) {
			req := c.request()
			return l.answer(ctx, c, req, l.refused(&g, req), false)
		}
	}
	err := l.ask(ctx, c)
	if err == nil {
		l.passed(&g)
		return nil
	}
	if errors.Is(err, errors.ErrUnsupported) {
		l.passed(&g) // the store answered
		return fmt.Errorf("sluice: %w", err)
	}
	req := c.request()
	l.failure(ctx, &g, err, req)
	return l.answer(ctx, c, req, err, true)
}

// ask makes c's store call within the store timeout, and tells the hooks.
func (l *Limiter) ask(ctx context.Context, c *call) error {
	ctx, cancel := l.bound(ctx)
	defer cancel()
	start := l.started()
	var err error
	switch c.op {
	case opTakeOne:
		c.r, err = l.one.TakeOne(ctx, c.key, c.limit, c.n, c.now)
	case opTake:
		c.rs, err = l.store.Take(ctx, c.req)
	case opTakeAt:
		var t Taken
		t, err = l.store.TakeAt(ctx, c.req)
		if err == nil && (len(t.Results) != c.req.Len() || len(t.At) != c.req.Len()) {
			err = fmt.Errorf("the store returned %d results and %d instants for %d limits", len(t.Results), len(t.At), c.req.Len())
		}
		c.rs, c.at = t.Results, t.At
	}
	l.called("take", start, err)
	return err
}

// answer answers req, c's request, which the store could not decide
// (err): by the error policy, after the caller's cancellation and the
// StoreError hook when the store failed (failed) rather than a breaker
// refused it.
func (l *Limiter) answer(ctx context.Context, c *call, req Request, err error, failed bool) error {
	var rs []Result
	var local []Part
	if failed {
		rs, local, err = l.failedLocal(ctx, req, err)
	} else {
		rs, local, err = l.degradeLocal(ctx, req, err)
	}
	if err != nil {
		return err
	}
	c.at, c.local = nil, local
	c.set(rs, rs[0])
	return nil
}

// started returns the start of a store call, for called: the zero time
// when no hook wants it.
func (l *Limiter) started() time.Time {
	if l.hooks.StoreCall == nil {
		return time.Time{}
	}
	return time.Now()
}

// called tells Hooks.StoreCall of a call of op that started at start
// and ended with err.
func (l *Limiter) called(op string, start time.Time, err error) {
	if l.hooks.StoreCall != nil {
		l.hooks.StoreCall(op, time.Since(start), err)
	}
}
