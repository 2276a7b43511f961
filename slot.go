package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Errors of Concurrency slots.
var (
	// ErrSlotLost is wrapped by the error of Reservation.Renew when a
	// slot the reservation held is no longer held: its TTL ran out
	// before the renewal (a process stalled for longer than the TTL),
	// and another request may have taken its place.
	ErrSlotLost = errors.New("the slot's lease ended before it was renewed")
)

// Acquire holds one slot of limit, a Concurrency limit, for key: it is
// Reserve(ctx, key, limit, 1). The Reservation is admitted while fewer
// than limit.Limit slots of key are held; release the slot with its
// Release when the work ends, and keep it with KeepAlive (or Renew)
// while the work may outlast the slot's TTL.
func (l *Limiter) Acquire(ctx context.Context, key string, limit Limit) (*Reservation, error) {
	if limit.Algorithm != Concurrency {
		return nil, fmt.Errorf("%w: acquire needs a concurrency limit, got %s", ErrInvalidLimit, limit)
	}
	return l.Reserve(ctx, key, limit, 1)
}

// NewSlot returns a new slot name: 128 random bits, in 22 characters of
// unpadded base64url. A Limiter names the slot of every take with it.
func NewSlot() string {
	const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var b [22]byte
	hi, lo := rand.Uint64(), rand.Uint64()
	for i := range b {
		b[i] = digits[lo&63]
		lo = lo>>6 | hi<<58
		hi >>= 6
	}
	return string(b[:])
}

// slotFor returns a new slot for a take of parts that holds one (a
// Concurrency limit of a Cost above 0), or "".
func slotFor(parts []Part) string {
	for _, p := range parts {
		if p.Cost > 0 && holdsSlot(p.Limits) {
			return NewSlot()
		}
	}
	return ""
}

// holdsSlot reports whether limits has a Concurrency limit.
func holdsSlot(limits []Limit) bool {
	for _, l := range limits {
		if l.Algorithm == Concurrency {
			return true
		}
	}
	return false
}

// Slot returns the name of the slot the reservation holds under its
// Concurrency limits, or "" when it holds none.
func (r *Reservation) Slot() string { return r.taken.Slot }

// Release ends the reservation's work at the cost it reserved: its
// slots are released and its other limits keep what they consumed. It is
// SettleParts with each part's reserved cost (see Settle: every settle
// releases the slots).
func (r *Reservation) Release(ctx context.Context) (MultiResult, error) {
	var buf [1]int
	costs := buf[:0]
	for _, p := range r.parts {
		costs = append(costs, p.Cost)
	}
	return r.SettleParts(ctx, costs...)
}

// Renew extends the hold of each slot the reservation holds to a full
// SlotTTL from now, and returns the state of its Concurrency limits (the
// Results of those limits alone, in order). A slot that is no longer held
// (its TTL ran out first) is not taken again: Renew then returns the
// state and an error wrapping ErrSlotLost, and the work should stop or
// take a new slot. A reservation without slots has nothing to renew and
// returns its own MultiResult. The errors are also Settle's for a denied
// or settled reservation, one wrapping errors.ErrUnsupported when the
// store cannot renew (Store.Renew), and a store failure, through the
// breaker and store timeout as a settle (no error policy answers it: the
// slot stays held until its TTL runs out, and KeepAlive tries again).
func (r *Reservation) Renew(ctx context.Context) (MultiResult, error) {
	r.mu.Lock()
	settled := r.settled
	r.mu.Unlock()
	switch {
	case settled:
		return MultiResult{}, fmt.Errorf("sluice: renew: %w", ErrSettled)
	case !r.Allowed:
		return MultiResult{}, fmt.Errorf("sluice: renew: %w", ErrNotReserved)
	}
	s, st := r.renewal()
	if s == nil {
		return r.MultiResult, nil
	}
	var rs []Result
	var err error
	if r.taken.At == nil {
		ctx, cancel := r.lim.bound(ctx)
		rs, err = st.Renew(ctx, s.req)
		cancel()
		for i := range rs {
			rs[i].Degraded = DegradedLocal
		}
	} else {
		rs, _, err = r.lim.settleCall(ctx, s, Taken{})
	}
	if err == nil && len(rs) != s.req.Len() {
		err = fmt.Errorf("the store returned %d results for %d limits", len(rs), s.req.Len())
	}
	if err != nil {
		return MultiResult{}, fmt.Errorf("sluice: renew: %w", err)
	}
	m := Combine(rs)
	if !m.Allowed {
		return m, fmt.Errorf("sluice: renew: %w", ErrSlotLost)
	}
	return m, nil
}

// renewal returns the renewal of the reservation's slots, and the store
// that holds them: nil and nil when it holds none.
func (r *Reservation) renewal() (*settling, Store) {
	s := &settling{renew: true}
	s.req.Slot = r.taken.Slot
	if r.lim.now != nil {
		s.req.Now = r.lim.now()
	}
	var store Store = r.lim.store
	parts := r.parts
	if r.taken.At == nil { // the error policy answered
		store = r.lim.policy.fallback
		parts = nil
		for _, lp := range r.local {
			parts = append(parts, lp.part)
		}
	}
	for _, p := range parts {
		if p.Cost == 0 || !holdsSlot(p.Limits) {
			continue
		}
		p.Limits = concurrencyOnly(p.Limits)
		s.req.Parts = append(s.req.Parts, p)
	}
	if len(s.req.Parts) == 0 {
		return nil, nil
	}
	return s, store
}

// KeepAlive renews the reservation's slots (Renew) every third of their
// shortest SlotTTL, from a goroutine of its own, until stop is called, the
// reservation is settled or denied, a slot is lost, or ctx is done: the
// slots of work that runs longer than their TTL stay held while the
// process lives, and free themselves within a TTL when it dies. A
// renewal that fails (a store outage) is tried again at the next tick.
// stop returns at once; a renewal under way when it is called may still
// reach the store, where a released slot is not taken again.
func (r *Reservation) KeepAlive(ctx context.Context) (stop func()) {
	ttl := time.Duration(0)
	for _, p := range r.parts {
		for _, lim := range p.Limits {
			if t := lim.SlotTTL(); t > 0 && (ttl == 0 || t < ttl) {
				ttl = t
			}
		}
	}
	if !r.Allowed || ttl == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(max(ttl/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, err := r.Renew(ctx)
			if errors.Is(err, ErrSlotLost) || errors.Is(err, ErrSettled) || errors.Is(err, errors.ErrUnsupported) {
				return
			}
		}
	}()
	return cancel
}

// concurrencyOnly returns the Concurrency limits of limits (a copy).
func concurrencyOnly(limits []Limit) []Limit {
	return slices.DeleteFunc(slices.Clone(limits), func(l Limit) bool { return l.Algorithm != Concurrency })
}
