package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-go/sluice"
)

// giveBackParts is the most leases one Refund call gives back (Release).
const giveBackParts = 64

// rest is what a lease that ends has left, to give back to the backing
// store: units of key under lim that the take at consumed (its Result's
// ResetAfter reset), refunded at now, on the lease's clock (zero: the
// store's).
type rest struct {
	key   string
	lim   sluice.Limit
	units int
	at    time.Time
	reset time.Duration
	now   time.Time
}

// rest returns what e, the lease of k, has to give back as it ends: its
// units, when the backing store is a Settler (e.at is set) and the state
// the block was counted in still remembers it (before start + the block's
// ResetAfter, on the lease's clock); otherwise nothing, the zero rest. A
// lease on the caller's clock is given back at callerNow, or at the
// shard's last Now if that is zero. sh.mu is held.
func (sh *shard) rest(k leaseKey, e *entry, callerNow time.Time) rest {
	if e.units == 0 || e.at.IsZero() || e.refill != nil {
		return rest{}
	}
	var now, clock time.Time // now: the refund's Now; clock: on the lease's clock
	switch {
	case e.own:
		clock = time.Now()
	case callerNow.IsZero():
		now, clock = sh.last, sh.last
	default:
		now, clock = callerNow, callerNow
	}
	if clock.Before(e.start) || !clock.Before(e.start.Add(e.reset)) {
		// A window that ended, a log or bucket that forgot the block: a
		// refund has nothing to give back to.
		return rest{}
	}
	lim := k.id
	lim.Limit, lim.Burst = e.limit, e.burst
	return rest{key: k.key, lim: lim, units: e.units, at: e.at, reset: e.reset, now: now}
}

// giveBack refunds rests to the backing store (a Settler: only then has a
// lease anything to give back), as the rest of the takes that consumed
// them: several at once, those refunded at the same Now. It returns the
// failures, joined.
func (s *Store) giveBack(ctx context.Context, rests []rest) error {
	if s.keepRests {
		return nil
	}
	slices.SortStableFunc(rests, func(a, b rest) int { return a.now.Compare(b.now) })
	var errs []error
	for len(rests) > 0 {
		n := 1
		for n < len(rests) && n < giveBackParts && rests[n].now.Equal(rests[0].now) {
			n++
		}
		req := sluice.Request{Now: rests[0].now}
		var t sluice.Taken
		for _, r := range rests[:n] {
			req.Parts = append(req.Parts, sluice.Part{Key: r.key, Limits: []sluice.Limit{r.lim}, Cost: r.units})
			t.Results = append(t.Results, sluice.Result{Allowed: true, Limit: r.lim.Capacity(), ResetAfter: r.reset})
			t.At = append(t.At, r.at)
		}
		if _, err := s.backing.Refund(ctx, req, t); err != nil {
			errs = append(errs, fmt.Errorf("lease: giving back the rest of %d leases (%q first): %w", n, rests[0].key, err))
		}
		rests = rests[n:]
	}
	return errors.Join(errs...)
}

// Release ends every lease of the replica: over a backing store that
// settles it gives their unspent units back to it, so that other
// replicas can use them, and drops them. Call it when the process stops
// deciding (before closing the backing store): a rolling deploy then hands
// its leases' units back rather than leaving them unused until their state
// ends. A lease being refilled while Release runs is kept. The Store stays
// usable: later requests lease again. A lease taken at a caller's Now
// (sluice.WithClock) is given back at the latest Now the Store was given
// for its shard of keys; one whose state has ended has nothing to give
// back. Release returns the backing store's failures, joined; the units
// of a failed give-back stay consumed, as they would without it.
func (s *Store) Release(ctx context.Context) error {
	var rests []rest
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.refill != nil {
				continue
			}
			if r := sh.rest(k, e, time.Time{}); r.units > 0 {
				rests = append(rests, r)
			}
			e.dead, e.units = true, 0
			delete(sh.m, k)
		}
		sh.mu.Unlock()
	}
	return s.giveBack(ctx, rests)
}
