package sluice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Taken is what a Store's TakeAt reports of a take, for its Refund.
type Taken struct {
	// Results are the take's, one per limit, as Take returns them.
	Results []Result
	// At holds the instant the store decided each limit at, in the order
	// of Results: one instant for a decision made in one atomic step
	// (req.Now, or the store's clock: the Redis server's TIME), one per
	// slot of a decision split over Redis Cluster slots. A nil At is a
	// take not known: the refund gives back to the latest consumption.
	At []time.Time
	// Slot is the take's Request.Slot: the slot it holds under its
	// Concurrency limits, which a Refund releases. An empty Slot is a
	// take not known: the refund releases the slot whose lease ends
	// first.
	Slot string
}

// Errors of Reserve and Settle.
var (
	// ErrSettled is wrapped by the error of Reservation.Settle when the
	// reservation was settled already: a retried settle never refunds
	// twice.
	ErrSettled = errors.New("reservation already settled")
	// ErrNotReserved is wrapped by the error of Reservation.Settle when
	// the reservation was denied: it consumed nothing, and the work it
	// asked for should not have run.
	ErrNotReserved = errors.New("reservation was denied and holds nothing")
)

// A Reservation is a request admitted at its largest cost, to be settled
// at its actual cost once the work is done (Limiter.Reserve). It is safe
// for concurrent use; it is settled once.
type Reservation struct {
	// MultiResult is the decision of the reservation, as AllowParts
	// would have answered it.
	MultiResult

	lim   *Limiter
	parts []Part // as reserved, the limits copied
	taken Taken  // the store's take; At nil when the error policy answered
	// local holds, when the local fallback decided some parts (a store
	// outage), the index of each in parts and the part as the fallback
	// took it (its limits cut to this replica's share).
	local []localPart

	mu      sync.Mutex
	settled bool

	// onePart and oneLimit hold parts and its Limits for a reservation of
	// one part of one limit, most: no allocation of their own.
	onePart  [1]Part
	oneLimit [1]Limit
}

// localPart is a part of a Reservation that the local fallback decided.
type localPart struct {
	index int
	part  Part
}

// Reserve decides a request of cost max by key under limit as
// AllowN(ctx, key, limit, max) does, for work whose cost is known only
// once it is done (an LLM call's tokens, an export's rows): it admits or
// denies on max, consumes max if it admits, and returns a Reservation
// that Settle then corrects to the actual cost. It is ReserveParts with
// one part.
func (l *Limiter) Reserve(ctx context.Context, key string, limit Limit, max int) (*Reservation, error) {
	r := &Reservation{}
	r.oneLimit[0] = limit
	r.onePart[0] = Part{Key: key, Limits: r.oneLimit[:], Cost: max}
	return l.reserve(ctx, r, r.onePart[:])
}

// ReserveParts decides parts as AllowParts does, each at its largest
// cost, and returns a Reservation to settle at the actual costs. The
// errors are AllowParts's, and one wrapping errors.ErrUnsupported when the
// store cannot report its instants (Store.TakeAt). It never answers from the deny cache
// (WithDenyCache). A store failure gets the error policy's answer, as in
// AllowParts, and the Reservation remembers who decided: see
// Reservation.SettleParts.
func (l *Limiter) ReserveParts(ctx context.Context, parts ...Part) (*Reservation, error) {
	r := &Reservation{}
	own := r.onePart[:0]
	if len(parts) > 1 {
		own = make([]Part, 0, len(parts))
	}
	for _, p := range parts {
		if len(parts) == 1 && len(p.Limits) == 1 {
			r.oneLimit[0] = p.Limits[0]
			p.Limits = r.oneLimit[:]
		} else {
			p.Limits = slices.Clone(p.Limits)
		}
		own = append(own, p)
	}
	return l.reserve(ctx, r, own)
}

// reserve is ReserveParts over parts that r owns (their Limits copied).
func (l *Limiter) reserve(ctx context.Context, r *Reservation, parts []Part) (*Reservation, error) {
	if err := someLimits(parts, "reservation"); err != nil {
		return nil, err
	}
	if err := validate(parts); err != nil {
		return nil, err
	}
	c := l.partsCall(opTakeAt, parts)
	if err := l.decide(ctx, &c); err != nil {
		return nil, err
	}
	t := Taken{Results: c.rs, At: c.at, Slot: c.req.Slot}
	r.MultiResult, r.lim, r.parts, r.taken = Combine(t.Results), l, parts, t
	for i, p := range c.local {
		if p.Cost > 0 {
			r.local = append(r.local, localPart{index: localIndex(parts, l, i), part: p})
		}
	}
	return r, nil
}

// localIndex returns the index in parts of the i-th part that the local
// fallback decides (degradeLocal's order).
func localIndex(parts []Part, l *Limiter, i int) int {
	for j, p := range parts {
		if l.modeOf(p) == modeLocal {
			if i == 0 {
				return j
			}
			i--
		}
	}
	return -1 // unreachable: degradeLocal decides no more parts than are local
}

// Settle settles the reservation at actual, the work's cost, for every
// part: SettleParts with actual for each.
func (r *Reservation) Settle(ctx context.Context, actual int) (MultiResult, error) {
	var buf [1]int // a reservation of one part, most: no allocation
	actuals := buf[:0]
	for range r.parts {
		actuals = append(actuals, actual)
	}
	return r.SettleParts(ctx, actuals...)
}

// SettleParts settles the reservation at one actual cost per part, in
// the order reserved (a part that keeps what it reserved, a per-request
// count beside a token budget, gives its reserved cost). A part that cost
// less than reserved gets the difference back (a refund); one that cost
// more is charged the difference, which is never denied: it is a debt,
// and the key's next requests are denied, with a RetryAfter saying until
// when, until it is repaid. The charge is at most the smallest Capacity of
// the part's limits (a debt of one full window or bucket), the most any
// request could have been admitted at. A part whose actual equals its
// reservation costs no store call.
//
// A refund is exact: the state is as if the reservation had taken only
// actual. fixed_window and sliding_window give back to the window the
// reservation was counted in (a settle after that window ended gives back
// nothing: what it counted no longer matters), sliding_log removes entries
// it added, and token_bucket and gcra move their state back, capped at a
// full bucket (less, by at most the refill of the time in between, if the
// bucket would have become full without the reservation). A refund never
// gives back to state reset or replaced since the reservation.
//
// It returns the state after the settle, one Result per limit as a request
// of cost 0 would see it, and the binding one (a limit in debt is denied).
// A Reservation is settled once: a second call returns an error wrapping
// ErrSettled, a denied one an error wrapping ErrNotReserved, and a
// reservation never settled keeps its full cost. What happens when things
// change in between:
//
//   - A store failure, or a breaker opened since the reservation: the
//     refund or charge fails and Settle returns the error; the
//     reservation keeps its full cost (what the work cost beyond it is
//     not charged). A breaker that refused the call leaves the
//     reservation unsettled, to be settled again later; any other failure
//     settles it (the store may have applied it: it is never applied
//     twice).
//   - A reservation the error policy answered: under AllowOnError it
//     consumed nothing, and Settle does nothing; under LocalOnError it
//     consumed from the fallback store, which Settle refunds or charges
//     (a refund to the latest consumption: the fallback's instants are
//     not kept), whatever the main store does meanwhile.
//   - A reloaded policy, or limits changed by the caller: the reservation
//     settles under the limits it was reserved under. A limit whose Limit
//     or Burst changed shares their state (Limit.Identity), so the settle
//     applies to the new limit too; one whose algorithm, period or name
//     changed no longer reads that state, and the settle does not reach it.
func (r *Reservation) SettleParts(ctx context.Context, actual ...int) (MultiResult, error) {
	if len(actual) != len(r.parts) {
		return MultiResult{}, fmt.Errorf("%w: %d actual costs for a reservation of %d parts", ErrInvalidCost, len(actual), len(r.parts))
	}
	for _, a := range actual {
		if a < 0 {
			return MultiResult{}, fmt.Errorf("%w: an actual cost must not be negative, got %d", ErrInvalidCost, a)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.settled:
		return MultiResult{}, fmt.Errorf("sluice: settle: %w", ErrSettled)
	case !r.Allowed:
		return MultiResult{}, fmt.Errorf("sluice: settle: %w", ErrNotReserved)
	}
	l := r.lim
	if r.taken.At == nil { // the error policy answered
		r.settled = true
		return r.settleLocal(ctx, actual)
	}
	refund, charge := r.split(actual, func(i int) Part { return r.parts[i] })
	if refund == nil && charge == nil {
		r.settled = true
		return r.MultiResult, nil
	}
	var rs []Result
	for _, s := range []*settling{refund, charge} {
		if s == nil {
			continue
		}
		got, refused, err := l.settleCall(ctx, s, r.taken)
		if refused {
			return MultiResult{}, fmt.Errorf("sluice: settle: %w", err)
		}
		r.settled = true
		if err != nil {
			return MultiResult{}, fmt.Errorf("sluice: settle: %w", err)
		}
		if s.whole(len(r.Results)) {
			rs = got
		} else {
			if rs == nil {
				rs = slices.Clone(r.Results)
			}
			s.place(rs, got)
		}
		if s.refund && l.deny != nil {
			for _, p := range s.req.Parts {
				l.deny.forget(p.Key, p.Limits)
			}
		}
	}
	return Combine(rs), nil
}

// settling is the store call of a settle: a refund of the parts that
// cost less than reserved (and the state of those that cost what they
// reserved) and of the slots they held, or a charge of those that cost
// more; or a renewal of the slots (Reservation.Renew).
type settling struct {
	refund bool
	renew  bool
	req    Request
	at     []int // the index in the reservation's Results of each limit of req

	onePart [1]Part // req.Parts and at of a settle of one part of up to
	oneAt   [4]int  // four limits, most: no allocation of their own
}

// whole reports whether s decides the n limits of its reservation, in
// order: its Results are the reservation's.
func (s *settling) whole(n int) bool {
	if len(s.at) != n {
		return false
	}
	for i, x := range s.at {
		if x != i {
			return false
		}
	}
	return true
}

// split returns the refund and the charge that settle the parts (part(i)
// is the i-th as it was taken) at actual: nil where there is none.
func (r *Reservation) split(actual []int, part func(i int) Part) (refund, charge *settling) {
	var buf [4]int // the first limit of each part, and the end
	first := append(buf[:0], 0)
	for _, p := range r.parts {
		first = append(first, first[len(first)-1]+len(p.Limits))
	}
	needRefund := false
	for i, a := range actual {
		p := part(i)
		if p.Limits == nil {
			continue
		}
		f := first[i]
		if p.Cost > 0 && holdsSlot(p.Limits) {
			// The work is over: its slots go back in the refund, at the
			// cost they were taken at, and the part's other limits settle
			// as any part's.
			needRefund = true
			slots, rates := p, p
			slots.Limits, rates.Limits = nil, nil
			var slotAt, rateAt []int
			for j, lim := range p.Limits {
				if lim.Algorithm == Concurrency {
					slots.Limits, slotAt = append(slots.Limits, lim), append(slotAt, f+j)
				} else {
					rates.Limits, rateAt = append(rates.Limits, lim), append(rateAt, f+j)
				}
			}
			settlingOf(&refund, true).add(slots, slotAt)
			if rates.Limits != nil {
				s := settleCost(&refund, &charge, &rates, a, &needRefund)
				s.add(rates, rateAt)
			}
			continue
		}
		s := settleCost(&refund, &charge, &p, a, &needRefund)
		s.addRange(p, f)
	}
	if !needRefund {
		refund = nil // the state of what cost as reserved needs no call
	}
	if now := r.lim.now; now != nil {
		for _, s := range []*settling{refund, charge} {
			if s != nil {
				s.req.Now = now()
			}
		}
	}
	return refund, charge
}

// settleCost sets p's Cost to what a settle at actual gives back or
// charges, and returns the settling it goes in: the charge if the work
// cost more than p reserved, the refund otherwise (a Cost of 0 when it
// cost as much: its state only), made if it is nil. needRefund is set
// when something is given back.
func settleCost(refund, charge **settling, p *Part, actual int, needRefund *bool) *settling {
	switch {
	case actual > p.Cost:
		p.Cost = min(actual-p.Cost, minCapacity(p.Limits))
		return settlingOf(charge, false)
	case actual < p.Cost:
		*needRefund = true
		p.Cost -= actual
	default:
		p.Cost = 0
	}
	return settlingOf(refund, true)
}

// settlingOf returns *s, made (a refund or a charge) if it is nil.
func settlingOf(s **settling, refund bool) *settling {
	if *s == nil {
		n := &settling{refund: refund}
		n.req.Parts, n.at = n.onePart[:0], n.oneAt[:0]
		*s = n
	}
	return *s
}

// add appends p to s, its limits at the indexes at in the reservation's
// Results.
func (s *settling) add(p Part, at []int) {
	s.req.Parts = append(s.req.Parts, p)
	s.at = append(s.at, at...)
}

// addRange appends p to s, its limits at the indexes from f on in the
// reservation's Results.
func (s *settling) addRange(p Part, f int) {
	s.req.Parts = append(s.req.Parts, p)
	for j := range p.Limits {
		s.at = append(s.at, f+j)
	}
}

// minCapacity returns the smallest Capacity of limits.
func minCapacity(limits []Limit) int {
	c := limits[0].Capacity()
	for _, l := range limits[1:] {
		c = min(c, l.Capacity())
	}
	return c
}

// place puts the Results of s's limits, got, at their positions in rs.
func (s *settling) place(rs, got []Result) {
	for k, x := range s.at {
		rs[x] = got[k]
	}
}

// taken returns what t, of the reservation's parts, says of the parts of
// s: nil At when t has none.
func (s *settling) taken(t Taken) Taken {
	if t.At == nil {
		return Taken{Slot: t.Slot}
	}
	if s.whole(len(t.Results)) {
		return t
	}
	out := Taken{Slot: t.Slot}
	for _, x := range s.at {
		out.Results = append(out.Results, t.Results[x])
		out.At = append(out.At, t.At[x])
	}
	return out
}

// settleCall runs the refund, charge or renewal s on the store, through the breakers of
// its nodes and within the store timeout. refused reports that a breaker
// kept it from the store: it did not run.
func (l *Limiter) settleCall(ctx context.Context, s *settling, t Taken) (rs []Result, refused bool, err error) {
	req := s.req
	var g gate
	if l.breaker != nil && !l.enter(&g, req.Parts[0].Key, req.Parts[1:]) {
		return nil, true, l.refused(&g, req)
	}
	bctx, cancel := l.bound(ctx)
	start, op := l.started(), "charge"
	switch {
	case s.renew:
		op = "renew"
		rs, err = l.store.Renew(bctx, req)
	case s.refund:
		op = "refund"
		rs, err = l.store.Refund(bctx, req, s.taken(t))
	default:
		rs, err = l.store.Charge(bctx, req)
	}
	l.called(op, start, err)
	cancel()
	if err == nil && len(rs) != req.Len() {
		err = fmt.Errorf("the store returned %d results for %d limits", len(rs), req.Len())
	}
	if err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			l.passed(&g) // the store answered
		} else {
			l.failure(ctx, &g, err, req)
		}
		return nil, false, err
	}
	l.passed(&g)
	return rs, false, nil
}

// settleLocal settles a reservation that the error policy answered: the
// parts the local fallback decided are refunded or charged there, the
// others (AllowOnError) consumed nothing and change nothing.
func (r *Reservation) settleLocal(ctx context.Context, actual []int) (MultiResult, error) {
	if len(r.local) == 0 {
		return r.MultiResult, nil
	}
	byIndex := make(map[int]Part, len(r.local))
	for _, lp := range r.local {
		byIndex[lp.index] = lp.part
	}
	refund, charge := r.split(actual, func(i int) Part { return byIndex[i] })
	rs := slices.Clone(r.Results)
	st := r.lim.policy.fallback
	ctx, cancel := r.lim.bound(ctx)
	defer cancel()
	for _, s := range []*settling{refund, charge} {
		if s == nil {
			continue
		}
		var got []Result
		var err error
		if s.refund {
			got, err = st.Refund(ctx, s.req, Taken{Slot: r.taken.Slot})
		} else {
			got, err = st.Charge(ctx, s.req)
		}
		if err != nil {
			return MultiResult{}, fmt.Errorf("sluice: settle: fallback: %w", err)
		}
		for i := range got {
			got[i].Degraded = DegradedLocal
		}
		s.place(rs, got)
	}
	return Combine(rs), nil
}

// Refund gives back each part's Cost to its limits without a
// reservation, for a caller that learns after a decision that the work
// consumed less than it was charged (Envoy's is_negative_hits, a handler
// whose work failed before it cost anything): a refund whose take is not
// known. fixed_window and sliding_window give back to the current window
// if it holds at least Cost (never to a window that has ended),
// sliding_log removes its newest Cost live entries if it holds that many,
// and token_bucket and gcra move back by Cost, at most to full; a limit
// whose state holds less changes nothing. Where the take is known, a
// Reservation's Settle is exact; Refund may give back what a later take of
// the same key consumed rather than the one it meant.
//
// It returns the state after the refund, one Result per limit as a
// request of cost 0 would see it. It goes through the breaker of each
// part's node and the store timeout as a decision does, but no error
// policy answers for it: a store failure, or a breaker that keeps it from
// the store, is returned (the units stay consumed), and a store that
// cannot give back gives an error wrapping errors.ErrUnsupported. A refund
// drops
// the deny cache's entries of each key it gives back to.
func (l *Limiter) Refund(ctx context.Context, parts ...Part) (MultiResult, error) {
	if err := someLimits(parts, "refund"); err != nil {
		return MultiResult{}, err
	}
	if err := validate(parts); err != nil {
		return MultiResult{}, err
	}
	s := &settling{refund: true}
	for _, p := range parts {
		p.Limits = slices.Clone(p.Limits)
		s.req.Parts = append(s.req.Parts, p)
	}
	if l.now != nil {
		s.req.Now = l.now()
	}
	rs, _, err := l.settleCall(ctx, s, Taken{})
	if err != nil {
		return MultiResult{}, fmt.Errorf("sluice: refund: %w", err)
	}
	if l.deny != nil {
		for _, p := range s.req.Parts {
			l.deny.forget(p.Key, p.Limits)
		}
	}
	return Combine(rs), nil
}

// Taken returns what the store took for the reservation, the parts as
// reserved and the store's Taken, for a process that settles it elsewhere
// (Limiter.Resume): a decision service that answers the reserve and, on
// another replica, the settle. ok is false for a reservation there is
// nothing to settle of elsewhere: denied, or answered by the error policy
// (what the local fallback took is in this process's memory only).
func (r *Reservation) Taken() (parts []Part, t Taken, ok bool) {
	if !r.Allowed || r.taken.At == nil {
		return nil, Taken{}, false
	}
	parts = make([]Part, len(r.parts))
	for i, p := range r.parts {
		p.Limits = slices.Clone(p.Limits)
		parts[i] = p
	}
	return parts, Taken{Results: slices.Clone(r.taken.Results), At: slices.Clone(r.taken.At), Slot: r.taken.Slot}, true
}

// Resume returns the admitted Reservation of parts that the store took as
// t (Reservation.Taken, in this process or another that shares the
// store), to be settled with this Limiter. Each part's Cost is what it
// reserved; t holds one Result and one instant per limit, in order, of
// which a refund reads the instant and ResetAfter. The limits may be
// those the caller holds now (a reloaded rule's): a limit whose Identity
// is the reserved one's shares its state, and the caller should leave out
// one whose Identity changed, whose state the reservation never touched.
// The errors are ReserveParts's for invalid parts, and one for a t that
// does not fit the parts.
func (l *Limiter) Resume(parts []Part, t Taken) (*Reservation, error) {
	if err := someLimits(parts, "reservation"); err != nil {
		return nil, err
	}
	if err := validate(parts); err != nil {
		return nil, err
	}
	n := 0
	own := make([]Part, len(parts))
	for i, p := range parts {
		p.Limits = slices.Clone(p.Limits)
		own[i] = p
		n += len(p.Limits)
	}
	if len(t.Results) != n || len(t.At) != n {
		return nil, fmt.Errorf("sluice: resume: a take of %d results and %d instants for %d limits", len(t.Results), len(t.At), n)
	}
	t = Taken{Results: slices.Clone(t.Results), At: slices.Clone(t.At), Slot: t.Slot}
	for i := range t.Results {
		t.Results[i].Allowed = true // it was admitted: only admitted reservations travel
	}
	return &Reservation{MultiResult: Combine(t.Results), lim: l, parts: own, taken: t}, nil
}
