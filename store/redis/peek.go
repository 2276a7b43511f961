package redis

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-go/sluice"
)

// peekScript replies what take.lua would, writing nothing (lua/peek.lua),
// over every algorithm: a peek is an operator's look, rare enough that
// one script serves them all.
var peekScript = compose("peek", sluice.Algorithms...)

// Peek implements sluice.Peeker: it returns what Take would return for
// req, and writes nothing to Redis. It is one call of lua/peek.lua, which
// runs the decision functions of take.lua and none of their writers
// (a bucket kept under another Limit or Burst is converted as Take would
// convert it, and not stored), straight to Redis: it is never coalesced
// with decisions. It runs no command that a decision does not run (see
// "Readiness and permissions").
//
// A request whose keys lie in several Cluster slots (or on several
// shards: WithSharding) is read one slot after another, as Take decides
// it (see "Stacked decisions on a Cluster"): up to the first slot that
// would deny, whose Results are then that slot's, while every other slot
// reports its state at cost 0, as Take reports it after giving back or
// without taking. Those reads are separate calls, so over several slots
// Peek is not one atomic read, nor is Take one atomic decision.
func (s *Store) Peek(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	now := clockArg(req.Now)
	var gs []*group
	if len(req.Parts) == 1 {
		p := req.Parts[0]
		gs = []*group{{keys: s.keys(p.Key, p.Limits), limits: p.Limits, cost: p.Cost}}
	} else {
		gs = s.groups(req)
	}
	if len(gs) == 1 {
		rs, err := s.peek(ctx, now, gs[0], false)
		if err != nil {
			return nil, fmt.Errorf("redis store: peek: %w", err)
		}
		return rs, nil
	}
	rs := make([]sluice.Result, req.Len())
	denied := -1
	for k, g := range gs {
		got, err := s.peek(ctx, now, g, false)
		if err != nil {
			return nil, fmt.Errorf("redis store: peek: %w", err)
		}
		g.place(rs, got)
		if !allowed(got) {
			denied = k
			break
		}
	}
	if denied < 0 {
		return rs, nil
	}
	// Take would give back what the slots before the denying one took,
	// and not take from those after it: each reports its state.
	var wg sync.WaitGroup
	errs := make([]error, len(gs))
	for k, g := range gs {
		if k == denied {
			continue
		}
		wg.Go(func() {
			got, err := s.peek(ctx, now, g, true)
			if err != nil {
				errs[k] = err
				return
			}
			g.place(rs, got)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("redis store: peek: %w", err)
		}
	}
	return rs, nil
}

// peek runs peek.lua over the limits of g at now (clockArg), each with
// its part's cost, or with cost 0 when zero is set.
func (s *Store) peek(ctx context.Context, now string, g *group, zero bool) ([]sluice.Result, error) {
	args := make([]string, 1, 1+4*len(g.limits))
	args[0] = now
	for i, l := range g.limits {
		cost := g.costOf(i)
		if zero {
			cost = 0
		}
		args = appendParams(args, l, cost)
	}
	reply, err := s.run(ctx, peekScript, g.keys, args)
	if err != nil {
		return nil, err
	}
	return results(g.limits, reply, 1)
}
