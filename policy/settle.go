package policy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
)

// Settle makes a rule charge what the work of a request cost, known only
// once its response is done (an LLM call's tokens, an export's rows, a
// stream's bytes): the request is admitted at the rule's Cost, its
// reserve (sluice.Limiter.Reserve), and settled at the cost its response
// reports (Decision.Settle): the difference is given back, or charged as
// a debt when the work cost more. A rule whose Cost is 1 is post-paid:
// it admits a request while the client's balance holds one unit, and
// charges the whole cost after, so that the balance overshoots by at most
// the costs of the requests in flight.
type Settle struct {
	// CostFrom is where the middleware and the proxy read the cost.
	CostFrom CostSource
	// Strip removes the cost's header or trailer from the response before
	// the client sees it.
	Strip bool
}

// CostSource is where a response reports the cost of its work.
type CostSource struct {
	// Header is the response header, or trailer (a streamed response's
	// cost, known at its end), that holds the cost as a decimal integer,
	// in canonical form; "" counts the bytes of the response body, what
	// a client that went away mid-stream was sent.
	Header string
}

// CostSourceSpecs lists the forms ParseCostSource accepts.
const CostSourceSpecs = "header:<name> (a response header or trailer holding the cost) or bytes (the response body's bytes)"

// ParseCostSource parses "header:<name>" or "bytes".
func ParseCostSource(s string) (CostSource, error) {
	if s == "bytes" {
		return CostSource{}, nil
	}
	name, ok := strings.CutPrefix(s, "header:")
	if !ok || name == "" || strings.IndexFunc(name, func(r rune) bool { return r > 127 || !isTokenChar(byte(r)) }) >= 0 {
		return CostSource{}, fmt.Errorf("%q is not a cost source; use %s", s, CostSourceSpecs)
	}
	return CostSource{Header: http.CanonicalHeaderKey(name)}, nil
}

// String returns the source as ParseCostSource reads it.
func (c CostSource) String() string {
	if c.Header == "" {
		return "bytes"
	}
	return "header:" + c.Header
}

// reserving reports whether any of as holds a rule that settles, or a
// concurrency limit (whose slot the end of the work releases), and spends
// something (a look, of cost 0, reserves nothing).
func reserving(as []Applied) bool {
	for i := range as {
		if as[i].spend > 0 && (as[i].Rule.Settle != nil || holdsSlot(as[i].Limits)) {
			return true
		}
	}
	return false
}

// holdsSlot reports whether limits has a sluice.Concurrency limit.
func holdsSlot(limits []sluice.Limit) bool {
	for _, l := range limits {
		if l.Algorithm == sluice.Concurrency {
			return true
		}
	}
	return false
}

// KeepAlive renews the slots the decision holds (its rules' concurrency
// limits) while the work runs: sluice.Reservation.KeepAlive of each of
// its reservations, until stop is called or ctx is done. A decision
// without slots has nothing to keep alive. The engine's SlotObserver
// (WithSlotObserver) is told of each rule's slot now, and of its end at
// the first call of stop, whose later calls do nothing.
func (d *Decision) KeepAlive(ctx context.Context) (stop func()) {
	var stops []func()
	var held []string // the rules whose slots the work holds
	seen := map[*sluice.Reservation]bool{}
	for i := range d.Applied {
		a := &d.Applied[i]
		r := a.reserved
		if r == nil || !r.Allowed || r.Slot() == "" {
			continue
		}
		if a.spend > 0 && holdsSlot(a.Limits) {
			held = append(held, a.Rule.Name)
		}
		if seen[r] {
			continue
		}
		seen[r] = true
		stops = append(stops, r.KeepAlive(ctx))
	}
	obs := d.slots
	if obs != nil {
		for _, rule := range held {
			obs(rule, 1)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, s := range stops {
				s()
			}
			if obs != nil {
				for _, rule := range held {
					obs(rule, -1)
				}
			}
		})
	}
}

// Settled reports whether the decision holds a reservation to settle:
// it was admitted, and a rule that applied settles (Rule.Settle) or
// holds a slot (a concurrency limit), which the settle releases.
func (d *Decision) Settled() bool {
	for i := range d.Applied {
		if r := d.Applied[i].reserved; r != nil && r.Allowed {
			return true
		}
	}
	return false
}

// Settle settles the decision's reservations once the work is done: cost
// returns what the work cost under each applied rule that settles, ok
// false when it is not known (the reservation keeps what it reserved).
// Rules that do not settle keep their cost. Each Applied's Results become
// the state after the settle. It is sluice.Reservation.SettleParts for
// the rules decided together, and for each rule in shadow mode, with its
// rules: a decision is settled once (sluice.ErrSettled), a cost above the
// reserve is a debt capped at the smallest capacity, and a failure leaves
// the reservation its whole cost. A decision with nothing to settle
// (Settled false) returns nil.
func (d *Decision) Settle(ctx context.Context, cost func(a *Applied) (n int, ok bool)) error {
	var errs []error
	for i := 0; i < len(d.Applied); {
		r := d.Applied[i].reserved
		j := i + 1
		for j < len(d.Applied) && d.Applied[j].reserved == r {
			j++
		}
		if r != nil && r.Allowed {
			if err := d.settleGroup(ctx, r, d.Applied[i:j], cost); err != nil {
				errs = append(errs, err)
			}
		}
		i = j
	}
	return errors.Join(errs...)
}

// settleGroup settles r, the reservation of as, at the costs cost gives,
// and tells d's SettleObserver of each rule's units.
func (d *Decision) settleGroup(ctx context.Context, r *sluice.Reservation, as []Applied, cost func(a *Applied) (int, bool)) error {
	actual := make([]int, len(as))
	for k := range as {
		a := &as[k]
		actual[k] = a.spend
		if a.Rule.Settle == nil {
			continue
		}
		if n, ok := cost(a); ok {
			if n < 0 {
				return fmt.Errorf("rule %q: %w: an actual cost must not be negative, got %d", a.Rule.Name, sluice.ErrInvalidCost, n)
			}
			actual[k] = n
		}
	}
	res, err := r.SettleParts(ctx, actual...)
	if err != nil {
		return err
	}
	off := 0
	for k := range as {
		a := &as[k]
		if d.settled != nil && actual[k] != a.spend {
			d.settled(a.Rule.Name, max(a.spend-actual[k], 0), min(max(actual[k]-a.spend, 0), minCapacity(a.Limits)))
		}
		a.Results = res.Results[off : off+len(a.Limits) : off+len(a.Limits)]
		off += len(a.Limits)
		a.Binding = sluice.Combine(a.Results).Binding
	}
	return nil
}

// A Ticket is a Decision's reservations in a form that travels: what a
// decision service hands its client at the reserve, for any replica
// sharing the store to settle (Engine.Resume). It names the rules and
// keys and holds what the store took, instants included.
type Ticket struct {
	// ID tells the ticket apart from every other: it is settled once,
	// by whichever process first resumes it.
	ID string
	// Expires is when the ticket can no longer be settled: when the last
	// of its limits' takes has run its period (a concurrency limit's:
	// its slot's lease), after which a window's count has ended, a bucket
	// has refilled and a slot not renewed is free. A renewal
	// (Engine.Renew) moves it.
	Expires time.Time
	// Parts are the parts of the decision's rules that settle or hold a
	// slot.
	Parts []TicketPart
	// Slot is the slot the parts hold under their concurrency limits
	// (sluice.Reservation.Slot), or "".
	Slot string
}

// TicketPart is one rule's part of a Ticket.
type TicketPart struct {
	// Group tells the reservations apart: parts of one Group were decided
	// together (the rules not in shadow mode), each rule in shadow mode
	// alone.
	Group int
	// Rule is the rule's name; Key the client key (Applied.Key), which
	// selects its plan.
	Rule, Key string
	// Stored is the key in the store.
	Stored string
	// Cost is what the part reserved.
	Cost int
	// Limits are what the store took of each limit.
	Limits []TicketLimit
}

// TicketLimit is what the store took of one limit of a TicketPart: the
// limit's identity (sluice.Limit.Identity), the instant the store decided
// at and the ResetAfter it answered, all a refund reads.
type TicketLimit struct {
	// Name, Algorithm and Period are the limit's identity, but that a
	// concurrency limit's Period is its slot's lease.
	Name      string
	Algorithm sluice.Algorithm
	Period    time.Duration
	// At is the instant the store decided the limit at (a concurrency
	// limit's: renewed it last).
	At time.Time
	// ResetAfter is the Result.ResetAfter the store answered.
	ResetAfter time.Duration
}

// Ticket returns the decision's reservations as a Ticket, ok false when
// there is nothing another process could settle: no rule settles, the
// decision was denied, or the error policy answered it (what a local
// fallback took is in this process's memory only). Only the parts of
// rules that settle are in it: the others kept their cost.
func (d *Decision) Ticket() (t Ticket, ok bool) {
	if !d.Settled() {
		return Ticket{}, false // every check of a rule that does not settle: no work
	}
	group := map[*sluice.Reservation]int{}
	for i := range d.Applied {
		a := &d.Applied[i]
		if a.reserved == nil || a.Rule.Settle == nil && !holdsSlot(a.Limits) {
			continue
		}
		parts, taken, ok := a.reserved.Taken()
		if !ok {
			continue
		}
		g, seen := group[a.reserved]
		if !seen {
			g = len(group)
			group[a.reserved] = g
		}
		// a's part in the reservation: its limits' offset in the take.
		off := 0
		for _, p := range parts[:a.part] {
			off += len(p.Limits)
		}
		tp := TicketPart{Group: g, Rule: a.Rule.Name, Key: a.Key, Stored: a.stored, Cost: a.spend}
		for k, l := range a.Limits {
			id := l.Identity()
			tp.Limits = append(tp.Limits, TicketLimit{Name: id.Name, Algorithm: id.Algorithm, Period: id.Period + l.SlotTTL(),
				At: taken.At[off+k], ResetAfter: taken.Results[off+k].ResetAfter})
		}
		t.Parts = append(t.Parts, tp)
		t.Slot = taken.Slot
	}
	if len(t.Parts) == 0 {
		return Ticket{}, false
	}
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	t.ID = hex.EncodeToString(id[:])
	t.Expires = t.expiry()
	return t, true
}

// span returns the earliest take of t and how long the ticket lives
// from it: until the last of its limits' takes has run its period.
func (t *Ticket) span() (first time.Time, period time.Duration) {
	var last time.Time
	for _, p := range t.Parts {
		for _, l := range p.Limits {
			if first.IsZero() || l.At.Before(first) {
				first = l.At
			}
			if end := l.At.Add(l.Period); end.After(last) {
				last = end
			}
		}
	}
	return first, last.Sub(first)
}

// expiry returns when t expires, by its takes.
func (t *Ticket) expiry() time.Time {
	first, period := t.span()
	return first.Add(period)
}

// settledLimit is the limit that claims a ticket, under the key
// nsSettled+ID: one admit per the ticket's life, so that a second claim
// before it expires (within one life of the first claim, which came after
// its first take) is denied.
func (t *Ticket) settledLimit() sluice.Limit {
	_, period := t.span()
	return sluice.Per(1, period).Using(sluice.GCRA).Named("settled")
}

// Errors of Engine.Resume.
var (
	// ErrTicket is wrapped by the error of a ticket no Decision made: no
	// ID, or an expiry its takes do not give.
	ErrTicket = errors.New("invalid ticket")
	// ErrTicketStale is wrapped by the error of a ticket that names no
	// rule that settles now with a limit it still has: the rules changed
	// since it was reserved, and it keeps what it reserved.
	ErrTicketStale = errors.New("ticket stale: the rules changed since it was reserved")
	// ErrTicketExpired is wrapped by the error of a ticket resumed after
	// its Expires: it keeps what it reserved.
	ErrTicketExpired = errors.New("ticket expired")
)

// Resume claims a Ticket and returns the Decision it holds, to be
// settled (Settle) by this process under the rules it holds now. A ticket
// is claimed once, across every process sharing the store, until it
// expires: a second Resume of it returns an error wrapping
// sluice.ErrSettled, so that a retried settle never refunds twice, and one
// after Expires an error wrapping ErrTicketExpired. (A claim whose settle
// then fails leaves the ticket claimed, keeping what it reserved.) A part whose rule no longer
// exists or no longer settles is left out, and so is each limit whose
// identity is no longer one of its rule's for the key (its state is not
// the one the reservation took from), or whose reserve the limits left
// could no longer admit; the rest settles as in the process that
// reserved. The error wraps ErrTicket for a ticket no Decision made,
// ErrTicketStale when nothing of it is left to settle, or is
// sluice.Limiter.Resume's.
func (e *Engine) Resume(ctx context.Context, t Ticket) (*Decision, error) {
	if t.ID == "" || !t.Expires.Equal(t.expiry()) {
		return nil, fmt.Errorf("policy: resume: %w: no ID, or an expiry its takes do not give", ErrTicket)
	}
	if e.lim.Now().After(t.Expires) {
		return nil, fmt.Errorf("policy: resume: %w at %s", ErrTicketExpired, t.Expires.UTC().Format(time.RFC3339))
	}
	d, err := e.resume(t)
	if err != nil {
		return nil, err
	}
	if err := e.claim(ctx, t); err != nil {
		return nil, fmt.Errorf("policy: resume: %w", err)
	}
	return d, nil
}

// claim claims t, once across every process sharing the store until it
// expires: an error wrapping sluice.ErrSettled if it was claimed before.
func (e *Engine) claim(ctx context.Context, t Ticket) error {
	claim, err := e.lim.AllowN(ctx, nsSettled+t.ID, t.settledLimit(), 1)
	switch {
	case err != nil:
		return fmt.Errorf("claiming the ticket: %w", err)
	case claim.Degraded != sluice.NotDegraded:
		return fmt.Errorf("claiming the ticket: the store failed, and the error policy answered")
	case !claim.Allowed:
		return sluice.ErrSettled
	}
	return nil
}

// Renew renews the slots a Ticket holds (sluice.Reservation.Renew) and
// returns the Decision's state after it, with the Ticket that replaces t:
// a new ID, whose Expires is a lease from now. t itself is claimed, as a
// settle would claim it, so that only the newest ticket of a slot settles
// or renews it: a renewal or a settle of t afterwards gets an error
// wrapping sluice.ErrSettled. The slots are renewed before t is claimed,
// so that a renewal that fails can be retried with t. The errors are
// Resume's, one wrapping sluice.ErrSlotLost when a slot's lease ended
// before the renewal (t is not claimed then: its slot is gone, and its
// other parts settle), and ErrTicketStale for a ticket that holds no slot
// under the rules e holds now.
func (e *Engine) Renew(ctx context.Context, t Ticket) (*Decision, Ticket, error) {
	if t.ID == "" || !t.Expires.Equal(t.expiry()) {
		return nil, Ticket{}, fmt.Errorf("policy: renew: %w: no ID, or an expiry its takes do not give", ErrTicket)
	}
	if e.lim.Now().After(t.Expires) {
		return nil, Ticket{}, fmt.Errorf("policy: renew: %w at %s", ErrTicketExpired, t.Expires.UTC().Format(time.RFC3339))
	}
	d, err := e.resume(t)
	if err != nil {
		return nil, Ticket{}, err
	}
	renewed := map[*sluice.Reservation][]sluice.Result{} // each one's slots' state after
	for i := range d.Applied {
		a := &d.Applied[i]
		if a.part != 0 || a.reserved.Slot() == "" {
			continue // a reservation's first part renews it, once
		}
		m, err := a.reserved.Renew(ctx)
		if err != nil {
			return nil, Ticket{}, fmt.Errorf("policy: renew: %w", err)
		}
		renewed[a.reserved] = m.Results
	}
	if len(renewed) == 0 {
		return nil, Ticket{}, fmt.Errorf("policy: renew: %w: it holds no slot", ErrTicketStale)
	}
	if err := e.claim(ctx, t); err != nil {
		return nil, Ticket{}, fmt.Errorf("policy: renew: %w", err)
	}
	next, ok := d.Ticket()
	if !ok {
		return nil, Ticket{}, fmt.Errorf("policy: renew: %w", ErrTicketStale)
	}
	now := e.lim.Now()
	for i := range next.Parts {
		for j := range next.Parts[i].Limits {
			if l := &next.Parts[i].Limits[j]; l.Algorithm == sluice.Concurrency {
				l.At = now
			}
		}
	}
	next.Expires = next.expiry()
	d.slotsRenewed(renewed)
	return d, next, nil
}

// slotsRenewed makes d, renewed, report its slots alone, in the state
// their renewal left them: rs holds, for each reservation of d, the
// Results of its parts' Concurrency limits in order (Reservation.Renew's).
// Its other limits were not read (a renewal touches slots only).
func (d *Decision) slotsRenewed(rs map[*sluice.Reservation][]sluice.Result) {
	kept := d.Applied[:0]
	for _, a := range d.Applied {
		var limits []sluice.Limit
		var results []sluice.Result
		for _, l := range a.Limits {
			if l.Algorithm != sluice.Concurrency || len(rs[a.reserved]) == 0 {
				continue
			}
			limits, results = append(limits, l), append(results, rs[a.reserved][0])
			rs[a.reserved] = rs[a.reserved][1:]
		}
		if len(limits) == 0 {
			continue
		}
		a.Limits, a.Results = limits, results
		a.Binding = sluice.Combine(results).Binding
		kept = append(kept, a)
	}
	d.Applied, d.enforced, d.binding = kept, len(kept), -1
}

// resume returns the Decision t holds under the rules e holds now.
func (e *Engine) resume(t Ticket) (*Decision, error) {
	set := e.set.Load()
	d := &Decision{Allowed: true, binding: -1}
	groups := map[int][]int{} // group → indices in d.Applied
	var order []int
	for _, tp := range t.Parts {
		rule := set.byName[tp.Rule]
		if rule == nil || rule.Settle == nil && !holdsSlot(rule.LimitsFor(tp.Key)) || tp.Cost < 1 {
			continue
		}
		a := Applied{Rule: rule, Key: tp.Key, stored: tp.Stored, Cost: tp.Cost, spend: tp.Cost}
		var at []time.Time
		var rs []sluice.Result
		for _, l := range rule.LimitsFor(tp.Key) {
			for _, tl := range tp.Limits {
				if id := l.Identity(); id.Name == tl.Name && id.Algorithm == tl.Algorithm && (id.Period == tl.Period || id.Algorithm == sluice.Concurrency) {
					a.Limits = append(a.Limits, l)
					at = append(at, tl.At)
					rs = append(rs, sluice.Result{Allowed: true, Limit: l.Capacity(), ResetAfter: tl.ResetAfter})
					break
				}
			}
		}
		if len(a.Limits) == 0 || tp.Cost > minCapacity(a.Limits) {
			continue
		}
		a.Results = rs
		a.resumeAt = at
		if _, ok := groups[tp.Group]; !ok {
			order = append(order, tp.Group)
		}
		groups[tp.Group] = append(groups[tp.Group], len(d.Applied))
		d.Applied = append(d.Applied, a)
	}
	if len(d.Applied) == 0 {
		return nil, fmt.Errorf("policy: resume: %w", ErrTicketStale)
	}
	out := make([]Applied, 0, len(d.Applied))
	for _, g := range order {
		var parts []sluice.Part
		taken := sluice.Taken{Slot: t.Slot}
		first := len(out)
		for k, i := range groups[g] {
			a := d.Applied[i]
			a.part = k
			parts = append(parts, sluice.Part{Key: a.stored, Limits: a.Limits, Cost: a.spend})
			taken.Results = append(taken.Results, a.Results...)
			taken.At = append(taken.At, a.resumeAt...)
			a.resumeAt = nil
			out = append(out, a)
		}
		r, err := e.lim.Resume(parts, taken)
		if err != nil {
			return nil, fmt.Errorf("policy: resume: %w", err)
		}
		for i := first; i < len(out); i++ {
			out[i].reserved = r
		}
	}
	d.Applied = out
	d.enforced = len(out)
	d.settled, d.slots = e.settled, e.slots
	return d, nil
}

// minCapacity returns the smallest Capacity of limits.
func minCapacity(limits []sluice.Limit) int {
	c := math.MaxInt
	for _, l := range limits {
		if l.Algorithm != sluice.Concurrency { // holds one slot whatever the cost
			c = min(c, l.Capacity())
		}
	}
	return c
}
