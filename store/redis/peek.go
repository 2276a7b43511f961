package redis

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-go/sluice"
)

// peekScript is take.lua made read only by lua/peek.lua: it replies what
// take.lua would, writing nothing, over every algorithm (a peek is an
// operator's look, rare enough that one script serves them all).
var peekScript = compose("peek+take", algorithms...)

// Peek implements sluice.Store: it returns what Take would return for
// req, and writes nothing to Redis. It is one call of take.lua made read
// only by lua/peek.lua, which runs its decision functions and none of
// their writers (a bucket kept under another Limit or Burst is converted as Take would
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
		gs = []*group{{keys: s.keys(p.Key, p.Limits), limits: p.Limits, cost: p.Cost, slot: req.Slot}}
	} else {
		gs = s.groups(req)
	}
	if len(gs) == 1 {
		t, err := s.runGroup(ctx, peekScript, now, gs[0], false)
		if err != nil {
			return nil, fmt.Errorf("redis store: peek: %w", err)
		}
		return t.results, nil
	}
	rs := make([]sluice.Result, req.Len())
	denied := -1
	for k, g := range gs {
		t, err := s.runGroup(ctx, peekScript, now, g, false)
		if err != nil {
			return nil, fmt.Errorf("redis store: peek: %w", err)
		}
		g.place(rs, t.results)
		if !allowed(t.results) {
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
			t, err := s.runGroup(ctx, peekScript, now, g, true)
			if err != nil {
				errs[k] = err
				return
			}
			g.place(rs, t.results)
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
