package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// leftover returns what becomes of what is left of e, the lease of k that
// req at now refills: over a backing store that settles, the rest to give back (if its state
// still holds it) before a new block is taken; otherwise what is kept of a
// lease still running, topped up to a block (it was counted in the same
// state), that of one that ended being dropped. The refill holds it
// meanwhile: at most one block per key is outstanding. sh.mu is held.
func (s *Store) leftover(sh *shard, k leaseKey, e *entry, req sluice.Request, now time.Time) (held, rest) {
	if s.settles.Load() {
		return held{}, sh.rest(k, e, req.Now)
	}
	if e.own == req.Now.IsZero() && !now.Before(e.start) && now.Before(e.end) {
		return held{units: e.units, end: e.end}, rest{}
	}
	return held{}, rest{}
}

// install makes g, taken for a request on the process's clock (own) or
// the caller's under lim, e's lease.
func (e *entry) install(g *granted, own bool, lim sluice.Limit) {
	e.units, e.start, e.end, e.reset, e.own, e.at = g.units, g.start, g.end, g.reset, own, g.at
	e.limit, e.burst = lim.Limit, lim.Burst
}

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
	at         time.Time // the backing store's instant of the block's take
}

// taken is what a refill answers its request: the Results, and the
// instant the backing store consumed the request's units at.
type taken struct {
	results []sluice.Result
	at      time.Time
}

// held is what a refill keeps of the lease it replaces: units counted in
// a state that lasts until end.
type held struct {
	units int
	end   time.Time
}

// refill asks the backing store for a block for req (leasable) at t0,
// topping up keep, and returns the request's answer, the lease to install,
// if any, and whether the next refill should skip the block (short: this
// one found none, or skipped it and was denied).
func (s *Store) refill(ctx context.Context, req sluice.Request, t0 time.Time, keep held, short bool) (taken, *granted, bool, error) {
	p := req.Parts[0]
	if !short || keep.units > 0 {
		n := s.blockFor(p.Limits[0]) - keep.units // >= Cost - keep.units >= 1
		rs, at, err := s.takeN(ctx, req, n)
		if err != nil {
			return taken{}, nil, short, err
		}
		if r := rs[0]; r.Allowed {
			out, g := s.grant(r, at, n, req, t0, keep)
			return out, g, false, nil
		} else if need := p.Cost - keep.units; r.Remaining >= need && r.Remaining < n {
			// The last units of the state: lease what is left.
			n = r.Remaining
			if rs, at, err = s.takeN(ctx, req, n); err != nil {
				return taken{}, nil, short, err
			}
			if rs[0].Allowed {
				out, g := s.grant(rs[0], at, n, req, t0, keep)
				return out, g, false, nil
			}
		}
	}
	// Too little for a block: the request itself, the store's answer
	// (what was kept is dropped). While the store denies, the next refill
	// asks for the cost alone, one call per denial; once it admits, for a
	// block again.
	rs, at, err := s.takeAt(ctx, req)
	if err != nil {
		return taken{}, nil, short, err
	}
	return taken{rs, at}, nil, !rs[0].Allowed, nil
}

// takeN takes n units of req's key and limit from the backing store.
func (s *Store) takeN(ctx context.Context, req sluice.Request, n int) ([]sluice.Result, time.Time, error) {
	p := req.Parts[0]
	p.Cost = n
	return s.takeAt(ctx, sluice.Request{Parts: []sluice.Part{p}, Now: req.Now})
}

// takeAt decides req, of one limit, on the backing store, and returns the
// instant the store decided it at: through its TakeAt, or zero over a
// backing store that cannot TakeAt (errors.ErrUnsupported), which is then
// asked its Take from then on and gets nothing given back.
func (s *Store) takeAt(ctx context.Context, req sluice.Request) ([]sluice.Result, time.Time, error) {
	if !s.settles.Load() {
		rs, err := s.backing.Take(ctx, req)
		return rs, time.Time{}, err
	}
	t, err := s.backing.TakeAt(ctx, req)
	if errors.Is(err, errors.ErrUnsupported) {
		s.settles.Store(false)
		return s.takeAt(ctx, req)
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	if len(t.Results) != 1 || len(t.At) != 1 {
		return nil, time.Time{}, fmt.Errorf("lease: the backing store returned %d results and %d instants for 1 limit", len(t.Results), len(t.At))
	}
	return t.Results, t.At[0], nil
}

// grant turns r, an admitted take of n units for req at t0 that the
// backing store decided at at, and keep into req's answer (its cost spent
// from them) and the lease of the rest, which ends no later than keep's
// state.
func (s *Store) grant(r sluice.Result, at time.Time, n int, req sluice.Request, t0 time.Time, keep held) (taken, *granted) {
	g := &granted{units: keep.units + n - req.Parts[0].Cost, start: t0, reset: r.ResetAfter, at: at}
	g.end = t0.Add(s.length(r, req.Parts[0].Limits[0]) + s.outlive)
	if keep.units > 0 && keep.end.Before(g.end) {
		g.end = keep.end
	}
	out := sluice.Result{Allowed: true, Limit: r.Limit, Remaining: g.units, ResetAfter: r.ResetAfter}
	return taken{[]sluice.Result{out}, at}, g
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
