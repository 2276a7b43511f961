package sluice

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sluice-go/sluice/internal/deadline"
)

// The Limiter's side of its circuit breakers (breaker.go): which of them
// a decision passes on its way to the store, what its outcome tells them,
// and the probes of an open one.

// gate is the breakers a decision passes on its way to the store, each
// with what it answered: that of the node of the request's first part
// and, for a request whose parts live on several nodes, those of the
// others. A Limiter without breakers leaves it empty.
type gate struct {
	first pass
	more  []pass
	start int64 // when the call began, on the breakers' clock
}

// pass is one breaker of a gate, and what its allow answered.
type pass struct {
	b  *breaker
	t  ticket
	ok bool
}

// each calls f with every pass of g.
func (g *gate) each(f func(p *pass)) {
	if g.first.b == nil {
		return
	}
	f(&g.first)
	for i := range g.more {
		f(&g.more[i])
	}
}

// holds reports whether b is one of g's breakers.
func (g *gate) holds(b *breaker) bool {
	if g.first.b == b {
		return true
	}
	for _, p := range g.more {
		if p.b == b {
			return true
		}
	}
	return false
}

// holdsNode reports whether the breaker of node is one of g's.
func (g *gate) holdsNode(node int) bool {
	found := false
	g.each(func(p *pass) { found = found || p.b.node == node })
	return found
}

// enter fills g with the breakers of the nodes of key and of the keys of
// rest, and reports whether every one of them lets the decision through.
// The Limiter has breakers.
func (l *Limiter) enter(g *gate, key string, rest []Part) bool {
	g.first.b = l.breakerOf(key)
	if l.noder != nil {
		for _, p := range rest {
			if b := l.breakerOf(p.Key); !g.holds(b) {
				g.more = append(g.more, pass{b: b})
			}
		}
	}
	g.first.t, g.first.ok = g.first.b.allow()
	ok := g.first.ok
	for i := range g.more {
		p := &g.more[i]
		p.t, p.ok = p.b.allow()
		ok = ok && p.ok
	}
	if ok {
		g.start = l.breakers.now()
	}
	return ok
}

// breakerOf returns the breaker of the node that decides key.
func (l *Limiter) breakerOf(key string) *breaker {
	if l.noder == nil {
		return l.breaker
	}
	return l.breakers.get(l.noder.Node(key))
}

// refused records a decision of req that a breaker of g kept from the
// store, sends the probe that each refusing breaker's ticket asks for, and
// returns the error the policy answers for: the first refusing breaker's.
func (l *Limiter) refused(g *gate, req Request) error {
	var err error
	now := l.breakers.now()
	g.each(func(p *pass) {
		if p.ok {
			return
		}
		p.b.arrived.Store(now)
		if p.t.probe {
			go l.probe(p.b, p.t, l.lookAt(req, p.b))
		}
		if err == nil {
			err = p.b.refusal()
		}
	})
	return err
}

// passed reports to the breakers of g, if any, that their call succeeded.
func (l *Limiter) passed(g *gate) {
	if g.first.b == nil {
		return
	}
	g.first.b.done(g.first.t, nil)
	for _, p := range g.more {
		p.b.done(p.t, nil)
	}
}

// failure reports to the breakers of g, if any, that their call, to
// decide req, failed with err, and probes the store while a breaker that
// this opened is open. A NodeError naming a node of g is charged to that
// node alone, and the nodes that answered before it count as successes;
// any other error is charged to every node of g.
func (l *Limiter) failure(ctx context.Context, g *gate, err error, req Request) {
	if g.first.b == nil {
		return
	}
	s := l.breakers
	if errors.Is(ctx.Err(), context.Canceled) && s.since(g.start) < s.span {
		// The caller gave up, and too soon to say anything of the store.
		// One that waited longer saw it slow: that counts as a failure.
		return
	}
	var ne *NodeError
	named := l.noder != nil && errors.As(err, &ne) && g.holdsNode(ne.Node)
	g.each(func(p *pass) {
		switch {
		case !named || p.b.node == ne.Node:
			if p.b.done(p.t, err) {
				go l.probeWhileOpen(p.b, l.lookAt(req, p.b))
			}
		case slices.Contains(ne.Answered, p.b.node):
			p.b.done(p.t, nil)
		}
	})
}

// lookAt returns req at cost 0, which consumes nothing, without the parts
// that other nodes than b's decide, in memory of its own (a probe outlives
// the call whose request it copies).
func (l *Limiter) lookAt(req Request, b *breaker) Request {
	look := Request{Parts: make([]Part, 0, len(req.Parts)), Now: req.Now}
	for _, mine := range []bool{true, false} {
		for _, p := range req.Parts {
			if mine && len(req.Parts) > 1 && l.breakerOf(p.Key) != b {
				continue
			}
			p.Cost = 0
			p.Limits = slices.Clone(p.Limits)
			look.Parts = append(look.Parts, p)
		}
		if len(look.Parts) > 0 {
			break
		}
		// None of its parts is on b's node any more (a Cluster slot moved
		// meanwhile): the probe looks at them all.
	}
	return look
}

// probeIdle is how long an open breaker goes on probing on its own (see
// probeWhileOpen) after the last decision it answered.
const probeIdle = time.Minute

// probeWhileOpen probes the store with look every Probe while b is open,
// so that it closes when its node is back although no decision arrives (a
// replica that its load balancer took out of service while it was not
// ready). It stops when b closes, or after probeIdle without a decision;
// decisions then probe as they arrive.
func (l *Limiter) probeWhileOpen(b *breaker, look Request) {
	s := l.breakers
	tick := time.NewTicker(s.probe)
	defer tick.Stop()
	for range tick.C {
		if b.load() == BreakerClosed || s.since(b.arrived.Load()) > probeIdle {
			return
		}
		if t, ok := b.allow(); !ok && t.probe {
			l.probe(b, t, look)
		}
	}
}

// probe sends look, a request at cost 0 (lookAt), to the store for b's
// probe t, bounded by the store timeout (DefaultStoreTimeout if there is
// none), and reports the outcome.
func (l *Limiter) probe(b *breaker, t ticket, look Request) {
	d := l.timeout
	if d <= 0 {
		d = DefaultStoreTimeout
	}
	ctx, cancel := deadline.WithTimeout(context.Background(), d)
	defer cancel()
	start := l.started()
	_, err := l.store.Take(ctx, look)
	l.called("take", start, err)
	b.done(t, err)
}
