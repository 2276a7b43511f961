// Package lease is an opt-in mode for hot keys: a Store that wraps any
// sluice.Store (typically the Redis store) and is itself one, so that
//
//	leased, err := lease.New(redisStore, lease.Block(10))
//	lim := sluice.New(leased)
//
// works with every algorithm. Instead of asking the backing store for every
// request, a replica takes a block of B units of a key's quota at once (one
// Take of cost B) and answers the next requests from that block in
// process, until it is spent or the lease ends. Backing-store calls per
// admitted decision fall by about B, and a key hotter than one Redis shard
// can serve is spread over the replicas' memory. Over a backing store that
// settles (the memory and Redis stores: their TakeAt and Refund do not
// fail with errors.ErrUnsupported), a lease gives back the units it did
// not spend, and
//
//	leased, err := lease.New(redisStore, lease.Block(10))
//
// settles too, so that Limiter.Reserve, Reservation.Settle and
// Limiter.Refund work over leases.
//
// # What is leased
//
// A request with one part and one limit, of a Capacity of at least
// MinCapacity (default 10 × B), and a cost from 1 to B is leased.
// Everything else goes straight to the backing store, unchanged, and its
// Result is the store's: several parts or several limits (all or nothing
// across limits cannot be answered from separate blocks), cost 0 (a peek
// reports the store's state), a cost above the block, and limits too small
// to share out in blocks (a block of 10 of a limit of 12 would leave the
// other replicas 2 until it ends). B is clamped to the limit's Capacity,
// so a block is always a valid request.
//
// Store.Peek (for sluice inspect) reads without spending:
// from this replica's lease when it would serve the request, otherwise
// from the backing store, whose state counts every replica's leased but
// unspent units as spent.
//
// # How a lease is taken and spent
//
// A replica holds at most one lease per key and limit identity
// (sluice.Limit.Identity). When a request finds no usable lease (none, spent
// below its cost, ended, or taken on the other clock), it refills it (step
// 1 says what becomes of the old lease's rest), while the replica's other
// requests for that key wait for the refill (one refill in flight per key and replica),
// bounded by their contexts (the Limiter's store timeout included). A
// replica so answers at most about B decisions per key per round trip to
// the backing store, queueing the rest in process rather than in Redis:
// choose B at least a replica's decisions per second on its hottest key
// times the round trip (100,000/s × 200µs: B = 20). (Sending the excess
// straight to the store instead was measured worse: it loads the store,
// which slows the refills, which sends more through.) The refill:
//
//  1. Take n = B − k, where k is what is left of a lease still running
//     (too little for this cost: it is topped up to a block, as its units
//     were counted in the same state; an ended lease's rest is dropped,
//     k = 0). If admitted, the lease holds k + n − cost units, ends no
//     later than the old one, and the request is admitted. Over a Settler
//     the old lease's rest is given back instead (see Giving back unspent
//     units), k = 0, and the new lease is a block of its own take.
//  2. If n is denied but the denial's Remaining r still fits the request
//     (cost − k ≤ r < n), take r: the last units of a window are leased
//     too, so that exactly the limit is admitted whatever the costs.
//  3. Otherwise (or if r is denied in turn) drop k, take the request's own
//     cost and return the store's Result as it is. Denials are always the store's:
//     a lease never denies, so every RetryAfter is the store's exact one.
//     After a denial the replica asks for the cost alone (one store call
//     per denial, as without leases) until the store admits one, and then
//     for blocks again; sluice.WithDenyCache on the Limiter answers
//     repeated denials without a call.
//
// A lease starts at t0, the instant read before its Take was sent: the
// request's Now when the caller gives one (sluice.WithClock), otherwise
// this process's monotonic clock, read under the lease's lock. It ends at
// t0 + L, where L is what the backing state allows:
//
//   - fixed_window: ResetAfter, the end of the window the block was counted
//     in;
//   - sliding_window: ResetAfter − Period, the end of the current window
//     (after an admit, ResetAfter runs to the end of the next one);
//   - sliding_log, token_bucket, gcra: ResetAfter, until the log empties
//     or the bucket is full again, when the backing state no longer
//     remembers the block;
//
// and no later than MaxAge after t0 when MaxAge is set. The store decided
// at some instant ts ≥ t0 of real time, and its ResetAfter runs from ts, so
// the lease ends no later than the backing state says (clocks running at
// the same rate; a skew between the replica and Redis does not matter,
// only elapsed time does). A request uses a lease only at instants in
// [t0, t0+L): a unit is never spent before it was counted, nor after the
// state it was counted in has ended.
//
// Results answered from a lease are honest: Allowed true, Limit the
// limit's Capacity, Remaining what the lease has left after this request
// (no more than the store reported before the block was taken; the
// replica admits at least that many more while the lease lasts, and the
// fleet may admit more), ResetAfter the block's ResetAfter less the time
// since it was taken (the state cannot recover sooner than the store
// said), RetryAfter 0. Remaining therefore falls from B−1 to 0 within each
// block.
//
// # Giving back unspent units
//
// Over a backing store that is no Settler, the units a lease did not spend
// are lost when it ends, is replaced or is evicted: that is
// under-admission, never over-admission, and it is bounded the same way
// as the overshoot: the units lost from one backing state (a window, say)
// are those left in leases when the demand stopped reaching their
// replicas, at most B per replica, so a fleet whose clients ask for more
// than the limit on every replica admits exactly the limit, and one whose
// demand moves between replicas at least Limit − N × B (for cost 1; larger
// costs also lose the rest of a lease whose top-up the store denied, step
// 3, when fewer units than the cost were left anyway).
//
// Over a Settler, a lease gives its rest back with the backing store's
// Refund, to the take of its block (the take's instant and ResetAfter,
// which make the refund exact), so that other replicas can use it:
//
//   - when it is replaced: a lease too little for a request is given back
//     before the next block is taken, rather than topped up, so that every
//     unit of a lease comes from its own block's take;
//   - when a request finds it ended while the state it was counted in
//     still holds it (MaxAge; a sliding_window lease, ended with its
//     window, whose units still weigh in the next one), or evicts it
//     (MaxLeases);
//   - when Store.Release ends every lease, as the process stops.
//
// A lease ended with its state (a window over, a log or bucket that no
// longer remembers the block) has nothing to give back to: it is dropped
// without a call. A give-back is made by the request that found the lease
// ended, before its refill, within its context; one that fails loses its
// units, as without a Settler. What stays unused is a lease left unspent
// until its state ends, or that nothing on its replica touches again
// before then (a lease ended by MaxAge is given back when its replica
// next decides the key, evicts it or is released). A give-back does not
// undo the N × B term of the bound below: it counts units spent after
// they were counted, and fixed_window and sliding_window have no
// overshoot with or without give-backs.
//
// # Reserving and settling
//
// Over a backing store that settles, requests that are not leased go to the backing store's TakeAt, Refund and Charge
// unchanged. For a leased request:
//
//   - TakeAt answers as Take does, and reports as the take's instant the
//     instant the backing store took the lease's block at: the take that
//     consumed what the request spent.
//   - Refund of such a take goes back into the lease the units came from,
//     in process and without a call, while that lease runs (on the
//     request's clock, its block taken at the take's instant) and would
//     then hold no more than a block; a later request spends them. Once
//     the lease has ended, been replaced or evicted, the refund goes to the
//     backing store as it is, to the block's take, which consumed those
//     units: since every unit of a lease comes from its block's take and
//     each is spent, given back or refunded once, a refund never gives
//     back more than the take consumed, nor to a state that no longer
//     holds it. (The take's ResetAfter is the lease's answer's, the block's
//     less the time since, so a token_bucket or gcra refund made after the
//     lease ended may give back a little less than exactly, never more.) A
//     refund without a take (Limiter.Refund) is the backing store's.
//   - Charge spends from the running lease first, whose units the store
//     has counted already, and charges the backing store only what the
//     lease does not hold, which leaves the lease spent: the key's next
//     request refills it and meets the debt, so a lease never admits
//     beyond it.
//
// Reserving and settling over Settling stores counts exactly: with every
// lease released, the backing store holds consumed what the work cost
// (the bucket refunds above aside; the package tests count it with 4
// replicas on a real redis-server, and check that a refund goes to the
// block that consumed its units).
//
// # The overshoot bound, and its proof
//
// Fix one key and limit, N replicas each with a lease Store over one
// backing store, and block B. For an interval I = [a, b) of real time let
// A(I) be the units the replicas admitted or charged with decision
// instants in I (spent from leases, admitted or charged by the backing
// store) less what refunds of those takes gave back, and C(I) the units
// the backing store consumed with decision instants in I (takes and
// charges) less what was given back to those takes (refunds, leases'
// rests). Then
//
//	A(I) ≤ C(I) + N × B.
//
// Proof. What the backing store admits or charges itself is consumed at
// its own instant, in I, and a refund of it to the store leaves both
// sides. A unit spent from a lease at s ∈ I, and not refunded, was
// consumed at ts ≤ s by the lease's block take (leases are used only from
// t0 ≤ ts on; a refund into a lease returns units of a take at the
// block's instant), and was not given back since: a lease gives back only
// units it holds, unspent. If ts ∈ I it is in C(I); otherwise ts < a and
// the unit was outstanding at a: consumed, not yet spent. Per replica and
// key at most B units are outstanding at any instant: a lease holds at
// most B (a refill takes B − k to top up the k units it keeps, or fewer;
// over a Settler it gives them back first; a refund into a lease never
// raises it above B), no lease is spent while its refill is in flight,
// and only one refill per key is in flight. So at most N × B units spent
// in I were consumed before a. ∎
//
// C(I) obeys the backing algorithm and its refunds (the conformance
// suite's business), so in any period P of real time the fleet admits at
// most what the algorithm alone admits in P plus N × B: for token_bucket
// and gcra Burst + Limit + N × B, for sliding_log Limit + N × B.
//
// When leases never outlive the state they were taken from, the N × B term
// is 0 for that state's own measure:
//
//   - fixed_window: take I = one window. A lease consumed before the
//     window began ended when its window did, so nothing is outstanding at
//     a: A(window) ≤ C(window) ≤ Limit. The fleet admits at most the limit
//     per window, exactly as the backing store does, and exactly the limit
//     when demand spends every lease before the window ends.
//   - sliding_window: every unit spent in a window was counted in that
//     window, before it was spent, so the real counts of the current and
//     previous windows never exceed the store's, and the weighted estimate
//     over real admits never exceeds the store's at the same instant,
//     which is at most Limit (the store checked it at each of its admits,
//     and it only falls in between).
//
// The proof reads instants from one clock per replica: the store's clock
// (this process's monotonic clock under the lease lock, and the Redis
// server's, which only the block's ResetAfter crosses into), or the caller's
// Now, in which case the bound holds when each replica's Nows do not go
// backwards.
//
// The package tests measure it: N replicas over one real redis-server and
// over the memory store, many goroutines, counting admits per window of a
// fake clock; fixed_window admits exactly the limit per window, every
// algorithm stays within C(I) + N × B in every period, sliding_window's
// estimate over real admits within the limit, and a lease made to outlive
// its window (a test-only hook) is caught admitting more. On the stores'
// own clocks (the Redis server's TIME) every algorithm admits exactly its
// limit. The bound is also measured over Settlers, whose leases give
// back; other tests count the give-backs (the rests of leases replaced,
// ended early, evicted and released) in the backing store, against a
// control whose leases keep their rests.
//
// # Reset, memory, concurrency
//
// Reset drops the replica's leases for the key under the given limits,
// before and after resetting the backing store (a refill racing with the
// reset is dropped as well; its units are lost), and gives nothing back:
// the reset gives back everything, and a lease refilled from the state
// before it must not give back to the state after. (A rest that a refill
// racing with the reset was giving back may still reach the state after
// it: at most the block that lease held, as a lease of another replica
// would, within the N × B that follows.) Release drops every lease of the
// replica, giving back their rests. Other replicas keep their leases until
// they end: resetting a leased key bounds what they admit after the reset
// by N × B as above. A Store holds at most MaxLeases leases (default
// DefaultMaxLeases); a full shard evicts ended or spent leases first, then
// any lease not being refilled (its units are lost, or given back over a
// Settler), and passes a request through when every lease is being
// refilled. A Store is safe for concurrent use.
//
// When the backing store fails, the refill's error goes to the request
// that asked for it and to every request waiting for it (none asks the
// failing store in turn), for the Limiter's ErrorPolicy to answer; a lease
// already held keeps answering until it is spent or ends, its units having
// been counted.
//
// The library guide is docs/library.md (https://github.com/sluice-go/sluice/blob/main/docs/library.md).
package lease
