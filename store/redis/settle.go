package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
)

// TakeAt implements sluice.Settler: Take, and the instant each limit was
// decided at (take.lua's now: the request's, or the server's TIME; one
// per slot of a decision split over Cluster slots).
func (s *Store) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	at := make([]time.Time, req.Len())
	rs, err := s.takeAt(ctx, req, at)
	if err != nil {
		return sluice.Taken{}, err
	}
	return sluice.Taken{Results: rs, At: at}, nil
}

// Refund implements sluice.Settler: one run of refund.lua per slot the
// keys of req lie in (one on a server alone or through Sentinel), at once
// over their masters, each atomic. A refund never waits for replicas
// (WithWaitReplicas): a failover that loses it leaves the consumption,
// which errs towards denying.
func (s *Store) Refund(ctx context.Context, req sluice.Request, t sluice.Taken) ([]sluice.Result, error) {
	return s.eachGroup(ctx, req, func(ctx context.Context, now string, g *group) ([]sluice.Result, error) {
		args := refundArgs(now, g, func(i int) (string, string) {
			if t.At == nil {
				return "", ""
			}
			k := g.index[i]
			return strconv.FormatInt(t.Results[k].ResetAfter.Microseconds(), 10), strconv.FormatInt(t.At[k].UnixMicro(), 10)
		})
		rs, err := s.settleVia(ctx, &refundScript, now, g, args)
		if err != nil {
			return nil, fmt.Errorf("refund: %w", err)
		}
		return rs, nil
	})
}

// settleVia runs the settle script sc over g at now (args: refundArgs or
// groupArgs, now first) through the coalescer, which sends concurrent settles of a
// lane in one call (see "Coalescing"), or alone.
func (s *Store) settleVia(ctx context.Context, sc *script, now string, g *group, args []string) ([]sluice.Result, error) {
	if s.co != nil {
		return s.co.settle(ctx, sc, now, g, args)
	}
	return s.runSettle(ctx, *sc, now, g, args)
}

// runSettle runs the settle script sc over g at now, alone.
func (s *Store) runSettle(ctx context.Context, sc script, now string, g *group, args []string) ([]sluice.Result, error) {
	reply, err := s.run(ctx, sc, g.keys, args)
	if err != nil {
		return nil, err
	}
	return results(g.limits, reply, 0)
}

// refundArgs returns refund.lua's arguments over g at now: now, then for
// each limit its parameters, cost, and the reset after and instant of its
// take (took), "" and "" for a take not known.
func refundArgs(now string, g *group, took func(i int) (reset, at string)) []string {
	args := make([]string, 1, 1+6*len(g.limits))
	args[0] = now
	for i, l := range g.limits {
		args = appendParams(args, l, g.costOf(i))
		reset, at := took(i)
		args = append(args, reset, at)
	}
	return args
}

// Charge implements sluice.Settler: one run of charge.lua per slot, as
// Refund. A charge never waits for replicas either: a failover that loses
// it loses the debt.
func (s *Store) Charge(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	return s.eachGroup(ctx, req, func(ctx context.Context, now string, g *group) ([]sluice.Result, error) {
		return s.settleVia(ctx, &chargeScript, now, g, groupArgs(now, g, false))
	})
}

// eachGroup runs f over each group of req's keys (refund.lua or charge.lua,
// which cannot deny: the groups need not be all or nothing), at once, and
// returns their Results in req's order, or the first failure.
func (s *Store) eachGroup(ctx context.Context, req sluice.Request, f func(ctx context.Context, now string, g *group) ([]sluice.Result, error)) ([]sluice.Result, error) {
	if s.topo != nil {
		s.topo.tick()
	}
	now := clockArg(req.Now)
	gs := s.groups(req)
	rs := make([]sluice.Result, req.Len())
	errs := make([]error, len(gs))
	if len(gs) == 1 {
		got, err := f(ctx, now, gs[0])
		if err != nil {
			return nil, s.failed(gs[0], nil, err)
		}
		gs[0].place(rs, got)
		return rs, nil
	}
	var wg sync.WaitGroup
	for k, g := range gs {
		wg.Go(func() {
			got, err := f(ctx, now, g)
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
