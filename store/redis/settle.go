package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
)

// TakeAt implements sluice.Store: Take, and the instant each limit was
// decided at (take.lua's now: the request's, or the server's TIME; one
// per slot of a decision split over Cluster slots).
func (s *Store) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	at := make([]time.Time, req.Len())
	rs, err := s.takeAt(ctx, req, at)
	if err != nil {
		return sluice.Taken{}, err
	}
	return sluice.Taken{Results: rs, At: at, Slot: req.Slot}, nil
}

// Refund implements sluice.Store: one run of refund.lua per slot the
// keys of req lie in (one on a server alone or through Sentinel), at once
// over their masters, each atomic. A refund never waits for replicas
// (WithWaitReplicas): a failover that loses it leaves the consumption,
// which errs towards denying.
func (s *Store) Refund(ctx context.Context, req sluice.Request, t sluice.Taken) ([]sluice.Result, error) {
	return s.eachGroup(ctx, req, func(ctx context.Context, now string, g group) ([]sluice.Result, error) {
		rs, err := s.settleVia(ctx, &refundScript, now, &g, refundTails(&g, t, g.index))
		if err != nil {
			return nil, fmt.Errorf("refund: %w", err)
		}
		return rs, nil
	})
}

// Settle arguments. refund.lua and charge.lua take now, then the limits
// of their keys in runs: an algorithm code and its two parameters once,
// the number n of keys in a row under that limit, then n tails, each
// key's own strings (a refund's cost, the reset after and the instant of
// its take; a charge's cost). A batch of settles under one rule, the
// usual case, sends its limit once and three strings per refund, where
// each key's own limit would take six.

// runs builds a settle script's arguments (see "Settle arguments").
type runs struct {
	args   []string
	code   string
	p1, p2 int64
	count  int // the index in args of the open run's count; 0: none open
	n      int // the keys of the open run
}

// add appends the limits of g, each with its tail: tails holds the same
// number of strings for each.
func (r *runs) add(g *group, tails []string) {
	w := len(tails) / len(g.limits)
	for i, l := range g.limits {
		code := algo.Code(l.Algorithm)
		p1, p2 := algo.Params(l)
		if r.count == 0 || code != r.code || p1 != r.p1 || p2 != r.p2 {
			r.end()
			r.args = append(r.args, code, strconv.FormatInt(p1, 10), strconv.FormatInt(p2, 10), "")
			r.code, r.p1, r.p2, r.count, r.n = code, p1, p2, len(r.args)-1, 0
		}
		r.args = append(r.args, tails[w*i:w*i+w]...)
		r.n++
	}
}

// end writes the open run's count; the arguments are then complete.
func (r *runs) end() {
	if r.count > 0 {
		r.args[r.count] = strconv.Itoa(r.n)
	}
}

// settleVia runs the settle script sc over g at now (tails: refundTails or
// chargeTails) through the coalescer, which sends concurrent settles of a
// lane in one call (see "Coalescing"), or alone.
func (s *Store) settleVia(ctx context.Context, sc *script, now string, g *group, tails []string) ([]sluice.Result, error) {
	if s.co != nil {
		return s.co.settle(ctx, sc, now, g, tails)
	}
	return s.runSettle(ctx, *sc, now, g, tails)
}

// runSettle runs the settle script sc over g at now, alone.
func (s *Store) runSettle(ctx context.Context, sc script, now string, g *group, tails []string) ([]sluice.Result, error) {
	r := runs{args: make([]string, 1, 1+4+len(tails))}
	r.args[0] = now
	r.add(g, tails)
	r.end()
	reply, err := s.run(ctx, sc, g.keys, r.args)
	if err != nil {
		return nil, err
	}
	return results(g.limits, reply, 0)
}

// refundTails returns the tails of refund.lua's arguments over g: for
// each limit its cost, and the reset after and instant of its take in t
// (index, when not nil, maps g's limits to t's order: a group's index of
// a request's limits), "" and "" for a take not known (nil t.At). Under
// a Concurrency limit the cost is the slot t held to release, or 1 for
// the slot not known (t.Slot empty), and the take is not needed.
func refundTails(g *group, t sluice.Taken, index []int) []string {
	tails := make([]string, 0, 3*len(g.limits))
	for i, l := range g.limits {
		if l.Algorithm == sluice.Concurrency {
			cost := min(g.costOf(i), 1)
			if cost > 0 && t.Slot != "" {
				tails = append(tails, "="+t.Slot, "", "")
			} else {
				tails = append(tails, strconv.Itoa(cost), "", "")
			}
			continue
		}
		reset, at := "", ""
		if t.At != nil {
			k := i
			if index != nil {
				k = index[i]
			}
			reset, at = strconv.FormatInt(t.Results[k].ResetAfter.Microseconds(), 10), strconv.FormatInt(t.At[k].UnixMicro(), 10)
		}
		tails = append(tails, strconv.Itoa(g.costOf(i)), reset, at)
	}
	return tails
}

// Renew implements sluice.Store: one run of renew.lua per slot the keys
// of req lie in, as Refund, each atomic, which extends the lease of slot
// req.Slot under each Concurrency limit of req where it is still held. A
// renewal never waits for replicas: a failover that loses it shortens the
// lease back to where it was, which frees the slot early rather than
// late. A renewal is rare beside decisions (one per third of a lease per
// request held), so it goes alone, never coalesced.
func (s *Store) Renew(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	return s.eachGroup(ctx, req, func(ctx context.Context, now string, g group) ([]sluice.Result, error) {
		tails := make([]string, len(g.limits)) // each limit's slot
		for i, l := range g.limits {
			if l.Algorithm == sluice.Concurrency {
				tails[i] = req.Slot
			}
		}
		rs, err := s.runSettle(ctx, renewScript, now, &g, tails)
		if err != nil {
			return nil, fmt.Errorf("renew: %w", err)
		}
		return rs, nil
	})
}

// Charge implements sluice.Store: one run of charge.lua per slot, as
// Refund. A charge never waits for replicas either: a failover that loses
// it loses the debt.
func (s *Store) Charge(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	return s.eachGroup(ctx, req, func(ctx context.Context, now string, g group) ([]sluice.Result, error) {
		tails := make([]string, len(g.limits)) // each limit's cost
		for i := range tails {
			tails[i] = strconv.Itoa(g.costOf(i))
		}
		return s.settleVia(ctx, &chargeScript, now, &g, tails)
	})
}

// eachGroup runs f over each group of req's keys (refund.lua or charge.lua,
// which cannot deny: the groups need not be all or nothing), at once, and
// returns their Results in req's order, or the first failure. f gets a
// copy of each group, so that a group of one part stays on the stack.
func (s *Store) eachGroup(ctx context.Context, req sluice.Request, f func(ctx context.Context, now string, g group) ([]sluice.Result, error)) ([]sluice.Result, error) {
	if s.topo != nil {
		s.topo.tick()
	}
	now := clockArg(req.Now)
	if len(req.Parts) == 1 {
		// One part, most settles: one group in the request's order (as
		// takeAt's), whose index is not needed.
		g := s.partGroup(req.Parts[0], req.Slot)
		got, err := f(ctx, now, g)
		if err != nil {
			return nil, s.failed(&g, nil, err)
		}
		return got, nil
	}
	gs := s.groups(req)
	rs := make([]sluice.Result, req.Len())
	errs := make([]error, len(gs))
	if len(gs) == 1 {
		got, err := f(ctx, now, *gs[0])
		if err != nil {
			return nil, s.failed(gs[0], nil, err)
		}
		gs[0].place(rs, got)
		return rs, nil
	}
	var wg sync.WaitGroup
	for k, g := range gs {
		wg.Go(func() {
			got, err := f(ctx, now, *g)
			if err != nil {
				errs[k] = err
				return
			}
			g.place(rs, got)
		})
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			var answered []*group
			for j, g := range gs {
				if errs[j] == nil {
					answered = append(answered, g)
				}
			}
			return nil, s.failed(gs[k], answered, err)
		}
	}
	return rs, nil
}
