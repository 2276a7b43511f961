package sluice

import (
	"context"
	"fmt"
	"time"
)

// Store keeps rate-limit state and decides requests atomically. The memory
// and Redis stores in this module implement it; every implementation must
// pass the conformance suite in package storetest.
//
// A Limiter validates every Request before it reaches the store, so a Store
// may assume valid limits and costs: each Cost is at most the Capacity of
// each of its part's limits.
//
// A store that cannot do one of the operations (a backend that cannot read
// without deciding, or give units back) returns an error wrapping
// errors.ErrUnsupported from it: the Limiter then returns that error to
// the caller of the method that needed it (Peek, Reserve, Refund,
// Reservation.Renew), whatever its ErrorPolicy, and its breaker does not
// count it as a failure.
type Store interface {
	// Take decides whether every part of req fits: each part's Cost in
	// every one of its Limits for its Key. If and only if all of them fit,
	// it consumes each part's Cost from each of its limits; otherwise it
	// consumes nothing. It returns one Result per limit, the limits of
	// req.Parts[0] first, in order. A zero req.Now means the store's own
	// clock. A store decides in one atomic step where it can (the memory
	// store always; the Redis store when every key lives on one server or
	// Cluster slot) and states what it guarantees otherwise; it never
	// admits more than a limit allows (the Redis store over several
	// Cluster slots may deny requests that would fit while it gives back
	// what a denied request took).
	Take(ctx context.Context, req Request) ([]Result, error)
	// TakeAt is Take, and also reports the instants the store decided at,
	// which make a Refund of the take exact (Limiter.Reserve).
	TakeAt(ctx context.Context, req Request) (Taken, error)
	// Refund gives back what a take of the same parts consumed: each
	// part's Cost (at most the take's) from each of its limits, at
	// req.Now (the zero Now: the store's clock). t is the take's Taken,
	// or the zero Taken when it is not known. A refund never gives back
	// more than the take consumed, nor to state that is no longer the
	// take's (a window that ended, state reset since): see the
	// algorithms' rules in Reservation.Settle. A Concurrency limit of a
	// Cost above 0 releases its slot t.Slot if it is still held (or,
	// when t.Slot is empty, the held slot whose hold ends first). It
	// returns the state after the refund, one Result per limit as Take of
	// cost 0 would.
	Refund(ctx context.Context, req Request, t Taken) ([]Result, error)
	// Charge consumes each part's Cost from each of its limits whatever
	// they hold, and is never denied: a window's count or a log may
	// exceed its limit, a bucket's debt its capacity, and the key's next
	// requests are denied until the debt is repaid. It returns the state
	// after the charge, one Result per limit as Take of cost 0 would (a
	// limit in debt reports it denied, with the RetryAfter until a
	// request of cost 0 fits again). A Concurrency limit is not charged:
	// its slots stay as they are.
	Charge(ctx context.Context, req Request) ([]Result, error)
	// Renew extends the hold of slot req.Slot under each Concurrency
	// limit of req's parts (their Costs are not read) to end one
	// SlotTTL after req.Now (the zero Now: the store's clock), for
	// Reservation.Renew and KeepAlive. A slot that is no longer held
	// (released, or its TTL ran out) is not taken again. It returns one
	// Result per limit: Allowed if the slot was held and is renewed, and
	// the limit's state as Take of cost 0 would report it.
	Renew(ctx context.Context, req Request) ([]Result, error)
	// Peek returns what Take(ctx, req) would return at req.Now (the zero
	// Now: the store's clock), the same Results in the same order, and
	// changes nothing in the store: it writes no state, converts none
	// kept under another Limit or Burst, creates no entry, extends no
	// expiry and, in a store that forgets its least recently used
	// entries, does not count as a use (Limiter.Peek: sluice inspect).
	Peek(ctx context.Context, req Request) ([]Result, error)
	// Reset forgets the state of key under each of limits.
	Reset(ctx context.Context, key string, limits ...Limit) error
}

// OneTaker is an optional interface of a Store: a Store that has it
// decides a request of one key under one limit, what Allow and AllowN
// ask, without the Request and the []Result of Take, and so without
// allocating; a Limiter uses it for those requests when its store has it.
// The memory store has it.
//
// TakeOne(ctx, key, limit, cost, now) must return what Take returns for
// Request{Parts: []Part{{Key: key, Limits: []Limit{limit}, Cost: cost}},
// Now: now} (its one Result, or its error), with the same effect on the
// store's state. As for Take, the limit and cost are valid. A store that
// wraps another (to count or log its calls) is a OneTaker only if it
// forwards TakeOne too: otherwise its Limiter asks Take.
type OneTaker interface {
	TakeOne(ctx context.Context, key string, limit Limit, cost int, now time.Time) (Result, error)
}

// Request is one decision asked of a Store: one or more parts, all or
// nothing.
type Request struct {
	// Parts are decided together; there is at least one.
	Parts []Part
	// Now is the instant of the decision. The zero value means the store's
	// clock: the Redis server's TIME for the Redis store, so that replicas
	// with skewed clocks agree.
	Now time.Time
	// Slot names the slot the request holds under each of its Concurrency
	// limits of a Cost above 0 (one slot per limit, all of this name): a
	// Limiter gives every take a new one (NewSlot), which its Reservation
	// keeps to release and renew the slot by. A store refuses a take that
	// needs a slot and has none. A Slot already held under a limit is not
	// held twice: an admitted take of it renews it (the decision does not
	// tell it apart from a new one).
	Slot string
}

// MaxSlotLen bounds the length of a Request's Slot.
const MaxSlotLen = 64

// CheckSlot reports a Request that a store must refuse for its Slot: one
// longer than MaxSlotLen, or none where a part of a Cost above 0 holds a
// slot under a Concurrency limit. A Limiter never sends either; a store
// checks, so that a caller of the Store interface cannot take a slot
// that nothing can release.
func (r Request) CheckSlot() error {
	if r.Slot != "" {
		if len(r.Slot) > MaxSlotLen {
			return fmt.Errorf("a slot of %d bytes; at most %d", len(r.Slot), MaxSlotLen)
		}
		return nil
	}
	for _, p := range r.Parts {
		for _, l := range p.Limits {
			if p.Cost > 0 && l.Algorithm == Concurrency {
				return fmt.Errorf("the take of key %q holds a slot of %s and names none (sluice.Request's Slot)", p.Key, l)
			}
		}
	}
	return nil
}

// A Part is what one client key spends in a decision: Cost from each of
// Limits. A request limited by several rules (per address, per API key)
// has one part per rule; a request limited by one key has one part.
type Part struct {
	// Key identifies the client (an API key, a user ID, an address).
	Key string
	// Limits are checked all or nothing; the limits of one key, across
	// all parts of a request, must have distinct identities (Name,
	// Algorithm, Period: see Limit.Identity).
	Limits []Limit
	// Cost is how much the request consumes; 0 asks for the state without
	// consuming anything.
	Cost int
	// OnError, unless it is the zero ErrorPolicy, answers for this part's
	// limits in place of the Limiter's policy when the store fails (see
	// ErrorPolicy). A LocalOnError here decides with the Limiter's
	// fallback store (ParseErrorPolicy keeps one under every policy);
	// stores ignore it. The default store timeout and breaker follow the
	// Limiter's own policy: a ReturnErrors Limiter whose parts carry
	// policies of their own gets them only with WithStoreTimeout and
	// WithBreaker.
	OnError ErrorPolicy
}

// Len returns the number of limits of req, the number of Results Take
// returns.
func (req Request) Len() int {
	n := 0
	for _, p := range req.Parts {
		n += len(p.Limits)
	}
	return n
}

// Noder is an optional interface of a Store whose keys live on several
// nodes that fail apart, as the masters of a Redis Cluster do. A Limiter
// over a Noder keeps one circuit breaker per node (see Breaker), so that
// a node that fails degrades the decisions of its own keys only, and
// charges each failure to the node that failed (see NodeError). The Redis
// store has it; a store of one node need not (a Limiter over a Store
// without it has one breaker). A store that wraps another is a Noder only
// if it forwards both methods (the wrappers in this module do).
//
// Node returns the node that decides the client key: a number from 0 to
// MaxNodes-1 that stays the node's as long as the node lives (a Redis
// Cluster shard keeps its number when a replica takes over from its
// master; a slot moved to another shard takes its keys to that shard's
// number). It is called for every decision, so it must be cheap, and must
// never wait for I/O. NodeName returns how reports name node (a Cluster
// shard's master, "127.0.0.1:7001"), which may change while the number
// does not; it must not block either. A number out of range is node 0's.
type Noder interface {
	Node(key string) int
	NodeName(node int) string
}

// MaxNodes bounds the node numbers of a Noder.
const MaxNodes = 1 << 12

// NodeError is the error of a store call that failed on one node of a
// Noder store: the Limiter charges the failure to that node's breaker
// alone (any other error is charged to every node of the request), and
// counts the nodes that answered before it failed as successes. Err says
// what failed, naming the node if the store names nodes.
type NodeError struct {
	// Node is the node that failed, as Noder.Node numbers it.
	Node int
	// Answered are the other nodes of the request that answered before
	// Node failed (a request split over several nodes).
	Answered []int
	// Err is the failure.
	Err error
}

// Error returns Err's message.
func (e *NodeError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *NodeError) Unwrap() error { return e.Err }
