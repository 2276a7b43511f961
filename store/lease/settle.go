package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// TakeAt implements sluice.Store: Take, and the instant the backing
// store consumed what the request spent at. For a request answered from a
// lease that is the instant of the lease's block take, which the lease
// remembers, so that Refund knows the take as the lease's; for any other
// request, the backing store's TakeAt. Once the backing store has said
// it cannot TakeAt (errors.ErrUnsupported, when a lease was refilled
// from it), every TakeAt fails with that error, spending nothing: a
// lease over it cannot tell its takes apart for a refund.
func (s *Store) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	if !s.leasable(req) {
		return s.backing.TakeAt(ctx, req)
	}
	if !s.settles.Load() {
		return sluice.Taken{}, fmt.Errorf("lease: the backing store cannot settle: %w", errors.ErrUnsupported)
	}
	rs, at, err := s.decide(ctx, req)
	if err != nil {
		return sluice.Taken{}, err
	}
	return sluice.Taken{Results: rs, At: []time.Time{at}}, nil
}

// Refund implements sluice.Store. A refund of a take answered from the
// replica's running lease for its key (t's instant is the lease's block
// take) goes back into that lease, in process, as long as the lease then
// holds no more than a block: it returns the lease's Result after it, as a
// request spending nothing from it would see it. Every other refund goes
// to the backing store as it is: a take whose lease has ended or been
// replaced is refunded at the instant of its block's take, which consumed
// what it spent; a refund without a take (t's At nil, Limiter.Refund) is
// the backing store's refund of the latest consumption.
func (s *Store) Refund(ctx context.Context, req sluice.Request, t sluice.Taken) ([]sluice.Result, error) {
	if r, ok := s.refundLease(req, t); ok {
		return []sluice.Result{r}, nil
	}
	return s.backing.Refund(ctx, req, t)
}

// Renew implements sluice.Store: a Concurrency limit is never leased,
// so its renewal is the backing store's.
func (s *Store) Renew(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	return s.backing.Renew(ctx, req)
}

// Charge implements sluice.Store. A charge of a leased limit is spent
// first from the replica's running lease for its key, whose units the
// backing store has counted already, and what the lease does not hold is
// charged to the backing store, which leaves the lease spent: the key's
// next request refills it and meets the debt. A charge the lease holds
// whole costs no backing-store call and returns the lease's Result after
// it. Every other charge is the backing store's.
func (s *Store) Charge(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	if left, r, ok := s.chargeLease(req); ok {
		if left == 0 {
			return []sluice.Result{r}, nil
		}
		p := req.Parts[0]
		p.Cost = left
		req.Parts = []sluice.Part{p}
	}
	return s.backing.Charge(ctx, req)
}

// running returns the lease of req's one part and limit if it runs at
// req's instant, on req's clock, with no refill in flight, and the
// instant; nil if there is none or req is not of one leased limit. sh.mu
// is held.
func (s *Store) running(sh *shard, req sluice.Request) (*entry, time.Time) {
	if len(req.Parts) != 1 || len(req.Parts[0].Limits) != 1 || req.Parts[0].Cost < 1 {
		return nil, time.Time{}
	}
	p := req.Parts[0]
	lim := p.Limits[0]
	if !s.leases(lim) {
		return nil, time.Time{}
	}
	now := sh.now(req)
	e := sh.m[leaseKey{key: p.Key, id: lim.Identity()}]
	if e == nil || e.refill != nil || !e.usable(now, req.Now.IsZero(), 0) {
		return nil, now
	}
	return e, now
}

// refundLease gives req's cost back to the running lease t was answered
// from, and returns the lease's Result after it; ok is false when the
// refund is not the lease's to take.
func (s *Store) refundLease(req sluice.Request, t sluice.Taken) (r sluice.Result, ok bool) {
	if len(t.At) != 1 || len(req.Parts) != 1 {
		return sluice.Result{}, false
	}
	sh := s.shard(req.Parts[0].Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, now := s.running(sh, req)
	p := req.Parts[0]
	if e == nil || !e.at.Equal(t.At[0]) || e.units+p.Cost > s.blockFor(p.Limits[0]) {
		return sluice.Result{}, false
	}
	e.units += p.Cost
	return e.result(now, p.Limits[0]), true
}

// chargeLease spends what it can of req's cost from its running lease,
// and returns the cost left to charge and the lease's Result after it; ok
// is false when there is no lease to spend from.
func (s *Store) chargeLease(req sluice.Request) (left int, r sluice.Result, ok bool) {
	if len(req.Parts) != 1 {
		return 0, sluice.Result{}, false
	}
	sh := s.shard(req.Parts[0].Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, now := s.running(sh, req)
	if e == nil || e.units == 0 {
		return 0, sluice.Result{}, false
	}
	p := req.Parts[0]
	spent := min(e.units, p.Cost)
	e.units -= spent
	return p.Cost - spent, e.result(now, p.Limits[0]), true
}
