package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
)

// group is the limits of a decision whose keys share one Cluster slot,
// decided by one script; index holds the position of each limit in the
// decision's Results (nil in a group of one part's limits alone, which
// takeAt and eachGroup make without groups: their order).
type group struct {
	shard  string // the slot, or the hash tag, that all its keys share
	keys   []string
	limits []sluice.Limit
	costs  []int // per limit; nil: every limit costs cost (a single part)
	cost   int
	index  []int
	slot   string // the slot it holds under its Concurrency limits (sluice.Request's)
}

// costOf returns the cost of the group's i-th limit.
func (g *group) costOf(i int) int {
	if g.costs == nil {
		return g.cost
	}
	return g.costs[i]
}

// costArg returns the scripts' cost argument of the group's i-th limit,
// at cost (costOf, or 0): the decimal cost, or under a Concurrency limit
// "=" and the slot a take of a cost above 0 holds (concurrency.lua).
func (g *group) costArg(i, cost int) string {
	if cost > 0 && g.limits[i].Algorithm == sluice.Concurrency {
		return "=" + g.slot
	}
	return strconv.Itoa(cost)
}

// splitMode says how a Store splits a decision over several client keys.
type splitMode uint8

const (
	unsplit splitMode = iota // one server: one script over every key
	bySlot                   // a Cluster: one script per hash slot
	byTag                    // client-side sharding (a Ring): one per hash tag
)

// groups splits req into the groups its scripts run over: one over every
// key, unless the store is on a Cluster and the parts' keys lie in
// different slots (then one per slot), or on client-side shards and the
// parts have different client keys (then one per client key), in the
// order of their first part. All the keys of one part share its client
// key's hash tag, hence a slot and a shard. The prefix holds no '{' (it is
// percent-encoded), so a key's first '{' opens its tag.
func (s *Store) groups(req sluice.Request) []*group {
	var gs []*group
	i := 0
	for _, p := range req.Parts {
		keys := s.keys(p.Key, p.Limits)
		var sh string
		switch s.split {
		case bySlot:
			sh = strconv.Itoa(slot(keys[0]))
		case byTag:
			sh = keys[0][strings.IndexByte(keys[0], '{'):strings.IndexByte(keys[0], '}')]
		}
		var g *group
		for _, h := range gs {
			if h.shard == sh {
				g = h
			}
		}
		if g == nil {
			g = &group{shard: sh, slot: req.Slot}
			gs = append(gs, g)
		}
		g.keys = append(g.keys, keys...)
		g.limits = append(g.limits, p.Limits...)
		for range p.Limits {
			g.costs = append(g.costs, p.Cost)
			g.index = append(g.index, i)
			i++
		}
	}
	return gs
}

// partGroup returns the group of one part alone, holding slot: its limits
// in its order (index nil), without groups' work.
func (s *Store) partGroup(p sluice.Part, slot string) group {
	return group{keys: s.keys(p.Key, p.Limits), limits: p.Limits, cost: p.Cost, slot: slot}
}

// slot returns the Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, the part between the first '{' and the next '}' when that is not
// empty, or of the whole key, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return tagSlot(key)
}

// refundTimeout bounds giving back what a split decision took, which
// outlives the caller's context: the consumption would otherwise stay.
const refundTimeout = time.Second

// takeStacked decides a request whose n limits are split over the slots
// of gs, one group after another (see "Stacked decisions on a Cluster"):
// when a group denies, or fails, what the groups before it took is given
// back.
// at, when not nil, gets the instant each limit was decided at.
func (s *Store) takeStacked(ctx context.Context, now string, gs []*group, n int, at []time.Time) ([]sluice.Result, error) {
	rs := make([]sluice.Result, n)
	done := make([]taken, 0, len(gs))
	for k, g := range gs {
		t, err := s.take(ctx, now, g, false)
		if err != nil {
			if rerr := s.settle(ctx, now, gs[:k], done, nil, rs); rerr != nil {
				err = fmt.Errorf("%w; the parts taken before keep their consumption: %w", err, rerr)
			}
			return nil, s.failed(g, gs[:k], err)
		}
		if !allowed(t.results) {
			g.place(rs, t.results)
			// The denial stands whatever the refund does: an error would
			// let an error policy admit what a limit denied.
			_ = s.settle(ctx, now, gs[:k], done, gs[k+1:], rs)
			return rs, nil
		}
		done = append(done, t)
	}
	for k, g := range gs {
		g.place(rs, done[k].results)
		if at != nil {
			for _, i := range g.index {
				at[i] = time.UnixMicro(done[k].now).UTC()
			}
		}
	}
	return rs, nil
}

// settle gives back what each of the groups in took consumed (ts) and
// reads the state of the groups in rest, which did not run, all at once
// (they are on different slots), and places their Results in rs: after
// the refund, or as taken when the refund failed; the state of rest, or
// unknown (see unknown) when reading it failed. It returns the refunds'
// errors.
func (s *Store) settle(ctx context.Context, now string, in []*group, ts []taken, rest []*group, rs []sluice.Result) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(in))
	for i, g := range in {
		wg.Go(func() {
			r, err := s.refund(rctx, now, g, ts[i])
			if err != nil {
				errs[i], r = err, ts[i].results
			}
			g.place(rs, r)
		})
	}
	for _, g := range rest {
		wg.Go(func() {
			t, err := s.take(ctx, now, g, true)
			if err != nil {
				t.results = unknown(g.limits)
			}
			g.place(rs, t.results)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// refund runs refund.lua over g to give back what t took, and returns the
// state after it.
func (s *Store) refund(ctx context.Context, now string, g *group, t taken) ([]sluice.Result, error) {
	at := make([]time.Time, len(t.results))
	for i := range at {
		at[i] = time.UnixMicro(t.now)
	}
	rs, err := s.runSettle(ctx, refundScript, now, g, refundTails(g, sluice.Taken{Results: t.results, At: at, Slot: g.slot}, nil))
	if err != nil {
		return nil, fmt.Errorf("refund: %w", err)
	}
	return rs, nil
}

// place puts the Results of g's limits at their positions in rs.
func (g *group) place(rs, in []sluice.Result) {
	for i, r := range in {
		rs[g.index[i]] = r
	}
}

// allowed reports whether every one of rs admits.
func allowed(rs []sluice.Result) bool {
	for _, r := range rs {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// unknown is the Results of limits whose state could not be read: each
// would admit (it did not deny) with nothing known to remain.
func unknown(limits []sluice.Limit) []sluice.Result {
	rs := make([]sluice.Result, len(limits))
	for i, l := range limits {
		rs[i] = sluice.Result{Allowed: true, Limit: l.Capacity()}
	}
	return rs
}
