package memory

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
)

// TakeAt implements sluice.Store: Take, and the instant it decided at
// (req.Now, or the store's clock), for every limit.
func (s *Store) TakeAt(_ context.Context, req sluice.Request) (sluice.Taken, error) {
	if err := needsSlot(req); err != nil {
		return sluice.Taken{}, err
	}
	rs, now := s.take(req)
	at := time.UnixMicro(now).UTC()
	t := sluice.Taken{Results: rs, At: make([]time.Time, len(rs)), Slot: req.Slot}
	for i := range t.At {
		t.At[i] = at
	}
	return t, nil
}

// Refund implements sluice.Store: it gives back each part's Cost as
// algo's Refund rules say, atomically over every key of req, and returns
// the state after it.
func (s *Store) Refund(_ context.Context, req sluice.Request, t sluice.Taken) ([]sluice.Result, error) {
	slot := s.slotHash(t.Slot)
	return s.apply(req, func(i int, sp *algo.Spec, st algo.State, now, cost int64) (algo.State, int64, bool) {
		if sp.Concurrent() {
			if cost == 0 {
				return st, 0, false
			}
			return sp.Release(st, now, slot)
		}
		taken, reset := algo.Unknown, int64(0)
		if t.At != nil {
			taken, reset = t.At[i].UnixMicro(), t.Results[i].ResetAfter.Microseconds()
		}
		return sp.Refund(st, now, taken, reset, cost)
	}), nil
}

// Charge implements sluice.Store: it consumes each part's Cost whatever
// the limits hold (algo's Charge), atomically over every key of req, and
// returns the state after it.
func (s *Store) Charge(_ context.Context, req sluice.Request) ([]sluice.Result, error) {
	return s.apply(req, func(_ int, sp *algo.Spec, st algo.State, now, cost int64) (algo.State, int64, bool) {
		next, ttl := sp.Charge(st, now, cost)
		return next, ttl, true
	}), nil
}

// Renew implements sluice.Store: it extends the lease of slot req.Slot
// under each Concurrency limit of req (algo's Renew), atomically over
// every key of req, and returns the state after it, Allowed where the
// slot was held.
func (s *Store) Renew(_ context.Context, req sluice.Request) ([]sluice.Result, error) {
	slot := s.slotHash(req.Slot)
	held := make([]bool, req.Len())
	rs := s.apply(req, func(i int, sp *algo.Spec, st algo.State, now, _ int64) (algo.State, int64, bool) {
		if !sp.Concurrent() || slot == 0 {
			return st, 0, false
		}
		next, ttl, ok := sp.Renew(st, now, slot)
		held[i] = ok
		return next, ttl, ok
	})
	for i := range rs {
		rs[i].Allowed = held[i]
	}
	return rs, nil
}

// apply changes the state of every limit of req, its i-th in Results
// order, by f (which returns the state to store for ttl µs, and whether
// to store it), under the locks of all their shards, as Take does, and
// returns the state after it as a request of cost 0 sees it.
func (s *Store) apply(req sluice.Request, f func(i int, sp *algo.Spec, st algo.State, now, cost int64) (algo.State, int64, bool)) []sluice.Result {
	n := req.Len()
	rs := make([]sluice.Result, n)
	work := make([]decision, n)
	var scratch [256]byte
	keys, locked := s.lock(req.Parts, work, scratch[:0], nil)
	now := s.micros(req.Now) // once locked, as take reads it
	defer s.unlock(locked)
	i := 0
	for _, p := range req.Parts {
		for _, l := range p.Limits {
			d := &work[i]
			key := keys[d.k0:d.k1]
			d.read(key, l, now)
			sp := algo.SpecOf(l)
			if next, ttl, ok := f(i, &sp, d.st, now, int64(p.Cost)); ok {
				d.st = next
				d.save(key, next, ttl, now)
			}
			rs[i], _, _ = algo.Check(l, d.st, now, 0)
			i++
		}
	}
	for _, x := range locked {
		sh := &s.shards[x]
		sh.settle(max(sh.cap, n), now)
	}
	return rs
}
