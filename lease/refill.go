package lease

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
)

// flight is a refill in flight: done is closed when it ends, and err is
// then its backing store's error, if any.
type flight struct {
	done    chan struct{}
	err     error
	waiters int // requests waiting for it (guarded by the shard's mutex)
}

// granted is a lease a refill took.
type granted struct {
	units      int
	start, end time.Time
	reset      time.Duration
}

// held is what a refill keeps of the lease it replaces: units counted in
// a state that lasts until end.
type held struct {
	units int
	end   time.Time
}

// refill asks the backing store for a block for req (leasable) at t0,
// topping up keep, and returns the request's Results, the lease to
// install, if any, and whether the next refill should skip the block
// (short: this one found none, or skipped it and was denied).
func (s *Store) refill(ctx context.Context, req sluice.Request, t0 time.Time, keep held, short bool) ([]sluice.Result, *granted, bool, error) {
	p := req.Parts[0]
	if !short || keep.units > 0 {
		n := s.blockFor(p.Limits[0]) - keep.units // >= Cost - keep.units >= 1
		rs, err := s.takeN(ctx, req, n)
		if err != nil {
			return nil, nil, short, err
		}
		if r := rs[0]; r.Allowed {
			out, g := s.grant(r, n, req, t0, keep)
			return out, g, false, nil
		} else if need := p.Cost - keep.units; r.Remaining >= need && r.Remaining < n {
			// The last units of the state: lease what is left.
			n = r.Remaining
			if rs, err = s.takeN(ctx, req, n); err != nil {
				return nil, nil, short, err
			}
			if rs[0].Allowed {
				out, g := s.grant(rs[0], n, req, t0, keep)
				return out, g, false, nil
			}
		}
	}
	// Too little for a block: the request itself, the store's answer
	// (what was kept is dropped). While the store denies, the next refill
	// asks for the cost alone, one call per denial; once it admits, for a
	// block again.
	rs, err := s.backing.Take(ctx, req)
	if err != nil {
		return nil, nil, short, err
	}
	return rs, nil, !rs[0].Allowed, nil
}

// takeN takes n units of req's key and limit from the backing store.
func (s *Store) takeN(ctx context.Context, req sluice.Request, n int) ([]sluice.Result, error) {
	p := req.Parts[0]
	p.Cost = n
	return s.backing.Take(ctx, sluice.Request{Parts: []sluice.Part{p}, Now: req.Now})
}

// grant turns r, an admitted take of n units for req at t0, and keep into
// req's Result (its cost spent from them) and the lease of the rest, which
// ends no later than keep's state.
func (s *Store) grant(r sluice.Result, n int, req sluice.Request, t0 time.Time, keep held) ([]sluice.Result, *granted) {
	g := &granted{units: keep.units + n - req.Parts[0].Cost, start: t0, reset: r.ResetAfter}
	g.end = t0.Add(s.length(r, req.Parts[0].Limits[0]) + s.outlive)
	if keep.units > 0 && keep.end.Before(g.end) {
		g.end = keep.end
	}
	out := sluice.Result{Allowed: true, Limit: r.Limit, Remaining: g.units, ResetAfter: r.ResetAfter}
	return []sluice.Result{out}, g
}

// length is how long a lease of the admitted take r may live: no longer
// than the backing state it was counted in, and MaxAge.
func (s *Store) length(r sluice.Result, lim sluice.Limit) time.Duration {
	d := r.ResetAfter
	if lim.Normalized().Algorithm == sluice.SlidingWindow {
		// After an admit the count is in the current window and ResetAfter
		// runs to the end of the next one: the current one ends a Period
		// sooner.
		d -= lim.Period
	}
	if s.maxAge > 0 {
		d = min(d, s.maxAge)
	}
	return max(d, 0)
}
