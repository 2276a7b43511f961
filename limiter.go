package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/deadline"
)

// A Limiter decides requests against limits kept in a Store. It validates
// every request up front, supplies the clock, and applies its ErrorPolicy
// when the store fails. A Limiter is safe for concurrent use; most programs
// create one per store and share it. Create it with New: the zero value has
// no store.
type Limiter struct {
	store    Store
	one      OneTaker // store's, if it is one: Allow and AllowN ask it
	now      func() time.Time
	policy   ErrorPolicy
	hooks    Hooks
	timeout  time.Duration // 0: DefaultStoreTimeout unless the policy is ReturnErrors
	replicas func() int    // nil: 1

	breakerSet  bool
	breakerConf Breaker
	breakers    *breakers // nil: none
	breaker     *breaker  // node 0's: the only one unless noder is set; nil: none
	noder       Noder     // store's, if it is one and there are breakers (gate.go)

	deny *denyCache // nil: none (WithDenyCache)
}

// Option configures a Limiter.
type Option func(*Limiter)

// New returns a Limiter over store. Without options it uses the store's
// clock and returns store errors to the caller (ReturnErrors).
func New(store Store, opts ...Option) *Limiter {
	l := &Limiter{store: store}
	l.one, _ = store.(OneTaker)
	for _, o := range opts {
		o(l)
	}
	if l.breakerSet || l.policy.effective() != modeReturn {
		var name func(int) string
		if n, ok := store.(Noder); ok {
			l.noder, name = n, n.NodeName
		}
		if l.breakers = newBreakers(l.breakerConf, name, l.hooks.Breaker); l.breakers != nil {
			l.breaker = (*l.breakers.nodes.Load())[0]
		} else {
			l.noder = nil
		}
	}
	return l
}

// WithClock makes the Limiter pass now() to the store as the time of every
// decision, instead of letting the store read its own clock. Tests use it to
// drive the algorithms with fixed instants; production code should not,
// because the Redis store's own clock (the server's TIME) is what keeps
// replicas with skewed clocks in agreement.
func WithClock(now func() time.Time) Option {
	return func(l *Limiter) { l.now = now }
}

// Now returns the Limiter's clock (WithClock), or time.Now when the store
// reads its own: the time a caller should judge the Limiter's instants
// by (sluice.Taken's At), up to the skew between this process and the
// store.
func (l *Limiter) Now() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// WithErrorPolicy sets what the Limiter answers when the store fails.
func WithErrorPolicy(p ErrorPolicy) Option {
	return func(l *Limiter) { l.policy = p }
}

// WithStoreTimeout bounds every store call (decisions and Reset) to d. A
// store that does not answer in time has failed, and the ErrorPolicy
// decides (and the breaker counts it: see Breaker). Under every policy but
// ReturnErrors the default is DefaultStoreTimeout, so that a hung Redis is
// an outage the policy handles quickly; a caller's own deadline that
// expires first is handled the same way. A negative d sets no bound.
//
// A decision abandoned at the timeout may still complete in the store: the
// request is then refused or admitted by the policy while its cost was
// consumed.
//
// The timeout does not count the time the process could not run: a
// process starved of CPU (a loaded machine, a container throttled by its
// CPU quota) runs its overdue timers before it reads the replies that came
// meanwhile, which would blame a healthy store for the process's own
// stall. So when the timeout's timer fires L late (1ms or more), the
// deadline moves to max(L, 10ms) after it, up to three times; a timer on
// time ends the call. The context's Deadline, which clients that set
// socket deadlines from it keep (go-redis), stays the first.
func WithStoreTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.timeout = d }
}

// DefaultStoreTimeout bounds store calls under every ErrorPolicy but
// ReturnErrors, unless WithStoreTimeout says otherwise. It is about 16
// times the 99th percentile of a Redis decision measured on loopback with
// 256 concurrent callers (6.2 ms on a loaded 2-vCPU machine: see
// RELIABILITY.md), which leaves room for a Redis in another zone and for
// garbage-collection pauses while keeping a hung Redis from holding a
// request for long.
const DefaultStoreTimeout = 100 * time.Millisecond

// WithReplicas tells the Limiter how many replicas share its limits,
// replicas() at the time of each decision (at least 1; package policyfile
// learns it from heartbeats in Redis). While the store fails, a
// LocalOnError fallback then enforces each replica's share of every
// limit, Limit / replicas() and Burst / replicas() rounded down (at least
// 1, and at least the request's cost), so that the fleet admits about the
// limit rather than replicas × limit.
func WithReplicas(replicas func() int) Option {
	return func(l *Limiter) { l.replicas = replicas }
}

// Hooks are functions a Limiter calls as it works, for metrics and logs, in
// the manner of net/http/httptrace's ClientTrace: set the ones you need,
// and leave the others nil. They are called synchronously, from the
// goroutine that makes the call (a probe's from its own), so they must be
// quick and must not block; they may be called concurrently, except
// Breaker.
type Hooks struct {
	// StoreCall is told of every call the Limiter makes to its store
	// (not to a LocalOnError fallback), the breaker's probes included:
	// the operation, how long the call took, and its error. The
	// operations are "take" (Take, TakeOne and TakeAt), "reset", "peek",
	// "refund", "charge" and "renew".
	StoreCall func(op string, took time.Duration, err error)
	// StoreError is told of every store failure of a decision, before
	// the ErrorPolicy decides; use it to log or count outages.
	StoreError func(ctx context.Context, err error)
	// Breaker is told when a node's breaker opens (with the failure that
	// opened it in Err) and when it closes again (Err nil): once per
	// change, not per decision, and not of the probes in between. Calls
	// are never concurrent, in the order of the changes, whatever the
	// node.
	Breaker func(NodeBreaker)
}

// WithHooks sets the functions the Limiter calls as it works (see Hooks).
func WithHooks(h Hooks) Option {
	return func(l *Limiter) { l.hooks = h }
}

// Allow is shorthand for AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN decides whether a request of cost n by key fits in limit, and
// consumes n if it does; n = 0 reports the state without consuming. It
// returns an error wrapping ErrInvalidLimit or ErrInvalidCost for a request
// that can never be valid, the context's error when the caller cancels, and
// a store error only under the ReturnErrors policy (or LocalOnError without
// a working fallback).
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	if l.one != nil && limit.Algorithm != Concurrency { // a slot needs a Request
		if err := validateOne(limit, n); err != nil {
			return Result{}, err
		}
		c := call{op: opTakeOne, key: key, limit: limit, n: n}
		if l.now != nil {
			c.now = l.now()
		}
		err := l.take(ctx, &c)
		return c.r, err
	}
	o := onePool.Get().(*onePart)
	o.limit[0] = limit
	o.part[0] = Part{Key: key, Limits: o.limit[:], Cost: n}
	rs, err := l.takeParts(ctx, o.part[:])
	*o = onePart{}
	onePool.Put(o)
	if err != nil {
		return Result{}, err
	}
	return rs[0], nil
}

// onePart is the request of an AllowN to a store that is no OneTaker,
// reused: a decision allocates its part and its limit otherwise. Nothing
// keeps a request past the store call that decides it (a probe copies it:
// lookAt), so the memory can go back to the pool as soon as the call
// returns.
type onePart struct {
	part  [1]Part
	limit [1]Limit
}

var onePool = sync.Pool{New: func() any { return new(onePart) }}

// AllowAll decides a request of cost n by key against several limits at once
// (say 10 per second AND 1000 per hour): it is admitted, and n consumed from
// every limit, only if every limit admits it; otherwise nothing is consumed.
// The decision is one atomic store call. It is AllowParts with one part.
func (l *Limiter) AllowAll(ctx context.Context, key string, n int, limits ...Limit) (MultiResult, error) {
	return l.AllowParts(ctx, Part{Key: key, Limits: limits, Cost: n})
}

// AllowParts decides one request limited under several client keys at
// once, such as a per-address rule and a per-API-key rule: the request is
// admitted, and each part's Cost consumed from each of its limits, only if
// every limit of every part admits it; otherwise nothing is consumed. It
// is one store call (see Store.Take for what a store guarantees when the
// keys live on different Redis Cluster slots). The MultiResult holds one
// Result per limit, the first part's limits first.
func (l *Limiter) AllowParts(ctx context.Context, parts ...Part) (MultiResult, error) {
	if err := someLimits(parts, "decision"); err != nil {
		return MultiResult{}, err
	}
	rs, err := l.takeParts(ctx, parts)
	if err != nil {
		return MultiResult{}, err
	}
	return Combine(rs), nil
}

// someLimits reports a request (what: "decision", "peek") without parts,
// or with a part without limits.
func someLimits(parts []Part, what string) error {
	if len(parts) == 0 {
		return fmt.Errorf("%w: a %s needs at least one part", ErrInvalidLimit, what)
	}
	for _, p := range parts {
		if len(p.Limits) == 0 {
			return fmt.Errorf("%w: the part of key %q has no limit; a %s needs at least one", ErrInvalidLimit, p.Key, what)
		}
	}
	return nil
}

// Reset forgets the state of key under each of limits, so that its next
// request starts afresh, in the store and in a LocalOnError fallback. Store
// errors are returned whatever the policy.
func (l *Limiter) Reset(ctx context.Context, key string, limits ...Limit) error {
	for _, lim := range limits {
		if err := lim.Validate(); err != nil {
			return err
		}
	}
	if l.deny != nil {
		l.deny.forget(key, limits)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	if f := l.policy.fallback; f != nil {
		// What the key spent locally during an outage goes too, even if
		// the store is still down.
		if err := f.Reset(ctx, key, limits...); err != nil {
			return fmt.Errorf("sluice: reset fallback: %w", err)
		}
	}
	start := l.started()
	err := l.store.Reset(ctx, key, limits...)
	l.called("reset", start, err)
	if err != nil {
		return fmt.Errorf("sluice: reset: %w", err)
	}
	if l.deny != nil {
		// Again: a denial cached while the store was being reset.
		l.deny.forget(key, limits)
	}
	return nil
}

// Peek returns what AllowParts(ctx, parts...) would answer now, if
// nothing else happened first, and spends nothing: the Results of a
// request of each part's Cost (0: the state as it is), and whether it
// would be admitted. It validates parts as AllowParts does, and asks the
// store directly (Store.Peek), bounded by the store timeout
// (WithStoreTimeout).
//
// Peek reports the store's state only. It never answers from the deny
// cache (WithDenyCache), whose denials agree with the store's state
// anyway, and it is neither refused by an open breaker nor counted by it.
// It never applies the ErrorPolicy: when the store fails, or cannot peek
// (an error wrapping errors.ErrUnsupported), Peek returns the error, never
// a made-up or local answer, whatever the policy; a request decided
// meanwhile would get the policy's answer.
func (l *Limiter) Peek(ctx context.Context, parts ...Part) (MultiResult, error) {
	if err := someLimits(parts, "peek"); err != nil {
		return MultiResult{}, err
	}
	if err := validate(parts); err != nil {
		return MultiResult{}, err
	}
	req := Request{Parts: parts}
	if l.now != nil {
		req.Now = l.now()
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	start := l.started()
	rs, err := l.store.Peek(ctx, req)
	l.called("peek", start, err)
	if err != nil {
		return MultiResult{}, fmt.Errorf("sluice: peek: %w", err)
	}
	if len(rs) != req.Len() {
		return MultiResult{}, fmt.Errorf("sluice: peek: the store returned %d results for %d limits", len(rs), req.Len())
	}
	return Combine(rs), nil
}

// failedLocal is failed, and also returns the parts the local fallback
// decided (degradeLocal).
func (l *Limiter) failedLocal(ctx context.Context, req Request, err error) ([]Result, []Part, error) {
	if cerr := ctx.Err(); errors.Is(cerr, context.Canceled) {
		// The caller gave up; there is no one left to answer. (A caller's
		// deadline that expired while the store hung is an outage like any
		// other: the policy decides.) The store may have failed for a
		// reason of its own: the error wraps the context's error as well.
		if errors.Is(err, cerr) {
			return nil, nil, fmt.Errorf("sluice: %w", err)
		}
		return nil, nil, fmt.Errorf("sluice: %w: %w", cerr, err)
	}
	if l.hooks.StoreError != nil {
		l.hooks.StoreError(ctx, err)
	}
	return l.degradeLocal(ctx, req, err)
}

// bound applies the store timeout to ctx: a timeout that does not count
// the time the process could not run (internal/deadline).
func (l *Limiter) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	d := l.storeTimeout()
	if d <= 0 {
		return ctx, func() {}
	}
	return deadline.WithTimeout(ctx, d)
}

// storeTimeout returns the bound of a store call; 0 or less: none.
func (l *Limiter) storeTimeout() time.Duration {
	if l.timeout == 0 && l.policy.effective() != modeReturn {
		return DefaultStoreTimeout
	}
	return l.timeout
}

// validate checks every limit, each part's cost against each of its
// limits, and that no two limits of one key share storage.
func validate(parts []Part) error {
	for i, p := range parts {
		for j, lim := range p.Limits {
			if err := validateOne(lim, p.Cost); err != nil {
				return err
			}
			// Against every limit before it on the same key, in this part
			// and in earlier ones.
			id := lim.Identity()
			for k, q := range parts[:i+1] {
				earlier := q.Limits
				if k == i {
					earlier = q.Limits[:j]
				}
				for _, prev := range earlier {
					if q.Key == p.Key && prev.Identity() == id {
						return fmt.Errorf("%w: %s and %s share state on key %q; give one of them a distinct Name", ErrInvalidLimit, prev, lim, p.Key)
					}
				}
			}
		}
	}
	return nil
}

// validateOne checks limit and a cost n under it: validate of one part of
// one limit.
func validateOne(limit Limit, n int) error {
	if limit.valid() && n >= 0 && n <= limit.Capacity() {
		return nil
	}
	if err := limit.invalid(); err != nil {
		return err
	}
	return limit.ValidateCost(n)
}

// ErrorPolicy says what a Limiter answers when its store fails (Redis
// unreachable, timed out, out of memory), or when its breaker is open (see
// Breaker). Results made by the policy say so in Degraded, which names the
// policy. Whatever the policy, a Limiter never panics on a store error, and
// a request canceled by its caller gets its context's error.
//
// A Part may carry a policy of its own (Part.OnError), which then answers
// for its limits in place of the Limiter's: a login rule that fails closed
// while the rest of the API fails open.
//
// The policy answers every store error, including errors that are not
// outages (a key holding a value of another type): watch them with
// Hooks.StoreError.
type ErrorPolicy struct {
	mode     policyMode
	fallback Store
}

type policyMode uint8

const (
	// modeUnset is the zero ErrorPolicy: ReturnErrors for a Limiter, the
	// Limiter's policy for a Part.
	modeUnset policyMode = iota
	modeReturn
	modeAllow
	modeDeny
	modeLocal
)

// The fixed error policies; LocalOnError builds the fourth.
var (
	// ReturnErrors, the default, returns the store's error to the caller.
	ReturnErrors = ErrorPolicy{mode: modeReturn}
	// AllowOnError admits every request while the store fails (fail open):
	// availability over protection.
	AllowOnError = ErrorPolicy{mode: modeAllow}
	// DenyOnError denies every request while the store fails (fail closed),
	// with RetryAfter = DegradedRetryAfter.
	DenyOnError = ErrorPolicy{mode: modeDeny}
)

// DegradedRetryAfter is the RetryAfter of requests denied by DenyOnError.
const DegradedRetryAfter = time.Second

// LocalOnError decides with fallback, an in-process store such as
// memory.New(), while the main store fails: each replica then enforces the
// limits on its own, so the fleet admits up to replicas × limit, unless the
// Limiter knows the number of replicas (WithReplicas) and enforces its
// share. With a nil fallback, a Limiter returns store errors, and a Part
// decides with the Limiter's fallback.
func LocalOnError(fallback Store) ErrorPolicy {
	return ErrorPolicy{mode: modeLocal, fallback: fallback}
}

// ParseErrorPolicy returns the policy named by s: "return", "allow",
// "deny", or "local", which decides with fallback. fallback is kept under
// every policy, for the parts of a request whose own policy is local
// (Part.OnError); for a Limiter's "local" it must not be nil.
func ParseErrorPolicy(s string, fallback Store) (ErrorPolicy, error) {
	for i, name := range policyNames {
		if name == "" || name != s {
			continue
		}
		return ErrorPolicy{mode: policyMode(i), fallback: fallback}, nil
	}
	return ErrorPolicy{}, fmt.Errorf("sluice: error policy %q is not one of %s", s, strings.Join(policyNames[modeReturn:], ", "))
}

// OutagePolicies names the error policies that answer in a failing
// store's place, as ParseErrorPolicy, policy files (on_error) and the
// command line (--on-error) accept them: "allow", "deny" and "local".
var OutagePolicies = policyNames[modeAllow:]

// policyNames names each policyMode, as ParseErrorPolicy accepts it.
var policyNames = []string{modeUnset: "", modeReturn: "return", modeAllow: "allow", modeDeny: "deny", modeLocal: "local"}

// String returns the policy's name as ParseErrorPolicy accepts it; the
// zero ErrorPolicy is "" (a Limiter's ReturnErrors, a Part's "the
// Limiter's").
func (p ErrorPolicy) String() string { return policyNames[p.mode] }

// effective returns p's mode as a Limiter's policy.
func (p ErrorPolicy) effective() policyMode {
	if p.mode == modeUnset {
		return modeReturn
	}
	return p.mode
}

// Degradation says whether the store made a decision and, when it did not
// (it failed), which ErrorPolicy did. The zero value, NotDegraded, is a
// decision of the store.
type Degradation uint8

// The degradations, one per ErrorPolicy that answers in the store's place.
const (
	// NotDegraded: the store decided.
	NotDegraded Degradation = iota
	// DegradedAllow: AllowOnError admitted the request; the numbers are
	// made up.
	DegradedAllow
	// DegradedDeny: DenyOnError refused the request; the client exceeded
	// nothing, and the numbers are made up.
	DegradedDeny
	// DegradedLocal: LocalOnError's fallback store decided; its numbers
	// are the local state's.
	DegradedLocal
)

// MadeUp reports whether results so degraded carry numbers that nobody
// counted (DegradedAllow, DegradedDeny): Limit, Remaining and ResetAfter
// are then not worth showing a client. The local fallback's numbers
// (DegradedLocal) are real counts of this process's store.
func (d Degradation) MadeUp() bool { return d == DegradedAllow || d == DegradedDeny }

// degradedBy is the Degradation each policy's results carry.
var degradedBy = [...]Degradation{modeAllow: DegradedAllow, modeDeny: DegradedDeny, modeLocal: DegradedLocal}

// String returns "" for NotDegraded and the name of the ErrorPolicy that
// decided otherwise ("allow", "deny", "local").
func (d Degradation) String() string {
	for m, dd := range degradedBy {
		if dd == d && d != NotDegraded {
			return policyNames[m]
		}
	}
	return ""
}

// degradeLocal answers req, which the store could not decide (storeErr),
// by each part's error policy: its own or the Limiter's. Parts under
// ReturnErrors fail the whole request; parts under DenyOnError deny it,
// and then the local parts are only looked at, so that a denied request
// consumes nothing; the local parts are decided together by the fallback,
// with each limit cut to this replica's share. It also returns the parts
// the local fallback decided, as it decided them (nil: none).
func (l *Limiter) degradeLocal(ctx context.Context, req Request, storeErr error) ([]Result, []Part, error) {
	deny, local := false, 0
	for _, p := range req.Parts {
		switch l.modeOf(p) {
		case modeReturn:
			return nil, nil, fmt.Errorf("sluice: store: %w", storeErr)
		case modeDeny:
			deny = true
		case modeLocal:
			local++
		}
	}
	var localRs []Result
	var localParts []Part
	if local > 0 {
		if l.policy.fallback == nil {
			return nil, nil, fmt.Errorf("sluice: store: %w; the local error policy has no fallback store", storeErr)
		}
		sub, n := req, l.share()
		if local < len(req.Parts) || deny || n > 1 {
			sub.Parts = make([]Part, 0, local)
			for _, p := range req.Parts {
				if l.modeOf(p) != modeLocal {
					continue
				}
				if deny {
					p.Cost = 0
				}
				if n > 1 {
					p.Limits = shares(p.Limits, n, p.Cost)
				}
				sub.Parts = append(sub.Parts, p)
			}
		}
		var err error
		localParts = sub.Parts
		if localRs, err = l.policy.fallback.Take(ctx, sub); err != nil {
			return nil, nil, fmt.Errorf("sluice: store: %w; fallback: %w", storeErr, err)
		}
		if local == len(req.Parts) {
			// Every part local, the usual case: the fallback's Results.
			for i := range localRs {
				localRs[i].Degraded = DegradedLocal
			}
			return localRs, sub.Parts, nil
		}
	}
	rs := make([]Result, 0, req.Len())
	for _, p := range req.Parts {
		m := l.modeOf(p)
		for _, lim := range p.Limits {
			var r Result
			switch m {
			case modeLocal:
				r, localRs = localRs[0], localRs[1:]
			case modeAllow:
				r = Result{Allowed: true, Limit: lim.Capacity()}
			case modeDeny:
				r = Result{Limit: lim.Capacity(), RetryAfter: DegradedRetryAfter, ResetAfter: DegradedRetryAfter}
			}
			r.Degraded = degradedBy[m]
			rs = append(rs, r)
		}
	}
	return rs, localParts, nil
}

// modeOf returns the mode of the error policy that answers for p: its
// own, or the Limiter's.
func (l *Limiter) modeOf(p Part) policyMode {
	if p.OnError.mode != modeUnset {
		return p.OnError.mode
	}
	return l.policy.effective()
}

// share returns the number of replicas whose share of each limit the
// fallback enforces.
func (l *Limiter) share() int {
	if l.replicas == nil {
		return 1
	}
	return max(l.replicas(), 1)
}

// shares returns limits, each cut to one of n replicas' share, and never
// below cost.
func shares(limits []Limit, n, cost int) []Limit {
	out := make([]Limit, len(limits))
	for i, lim := range limits {
		if lim.Algorithm == Concurrency {
			cost = 1 // a request holds one slot, whatever its cost
		}
		lim.Limit = max(lim.Limit/n, 1, cost)
		if lim.Burst > 0 {
			lim.Burst = max(lim.Burst/n, 1, cost)
		}
		out[i] = lim
	}
	return out
}
