package policy

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice"
)

// Inspection is a client's state under one rule, read by Engine.Inspect
// without spending anything: what a request of Cost would get from each of
// the rule's limits (its plan's, for the client) if it came now.
type Inspection struct {
	// Rule is the compiled rule.
	Rule *Rule
	// Key is the client key as the rule yields it (an IPv6 address as its
	// prefix), as Applied.Key.
	Key string
	// Cost is the cost of the request inspected: the Check's, or the
	// rule's.
	Cost int
	// Allowed reports whether every limit of the rule would admit a
	// request of Cost now. A rule in shadow mode (Rule.Shadow) lets the
	// request through whatever it says.
	Allowed bool
	// Limits holds each limit that applies to the client, with the Result
	// a request of Cost would get under it: Remaining after that request
	// when it would be admitted, RetryAfter the wait until it would be
	// when not. When another limit would deny, a limit that alone would
	// admit reports its state as it is (Allowed, nothing spent), as a
	// denied request gets it.
	Limits []LimitState
	// Binding is the index in Limits of the binding limit: the one that
	// would deny with the longest wait, or, when every limit admits, the
	// one with the fewest remaining (sluice.MultiResult.Binding).
	Binding int
}

// LimitState is one limit of an Inspection and what it would answer.
type LimitState struct {
	// Limit is the limit, normalized (sluice.Limit.Normalized): its Name,
	// Algorithm, Limit, Period and effective Burst (0 for the window
	// algorithms).
	Limit sluice.Limit
	// Result is what a request of the Inspection's Cost would get under
	// Limit.
	Result sluice.Result
}

// Result returns the binding limit's Result: the request's answer, as
// Decision.Result would give it (the zero Result when there are no
// limits).
func (in *Inspection) Result() sluice.Result {
	if in.Binding >= len(in.Limits) {
		return sluice.Result{}
	}
	return in.Limits[in.Binding].Result
}

// Inspect reads the state of the client c.Key under the rule c.Rule, as
// Check would resolve them (the key's namespace, an IPv6 address grouped
// by its prefix, the plan whose keys match it), and answers what a
// request of c.Cost (nil: the rule's cost; 0: the state as it is) would
// get if it came now, without spending anything: it asks the store
// through sluice.Limiter.Peek, never the deny cache nor the error policy,
// and is not reported to the Observer nor logged as a denial. What it
// reads is the store's, exact at its instant: requests of other clients
// of the rule, other replicas, a reload or the passing of time may change
// what the next request gets.
//
// The error is an *UnknownRuleError, one wrapping ErrInvalidKey, or
// sluice.ErrInvalidCost for a cost a limit of the rule could never
// admit, whether or not the rule is in shadow mode; or the Limiter's:
// the store failed (whatever its error policy), or it cannot be read
// without deciding (errors.ErrUnsupported).
func (e *Engine) Inspect(ctx context.Context, c Check) (*Inspection, error) {
	a, err := e.set.Load().check(c)
	if err != nil {
		return nil, err
	}
	if err := a.costError(); err != nil {
		return nil, err
	}
	res, err := e.lim.Peek(ctx, sluice.Part{Key: a.stored, Limits: a.Limits, Cost: a.Cost})
	if err != nil {
		return nil, fmt.Errorf("rule %q: %w", a.Rule.Name, err)
	}
	in := &Inspection{Rule: a.Rule, Key: a.Key, Cost: a.Cost, Allowed: res.Allowed, Binding: res.Binding, Limits: make([]LimitState, len(a.Limits))}
	for i, l := range a.Limits {
		in.Limits[i] = LimitState{Limit: l.Normalized(), Result: res.Results[i]}
	}
	return in, nil
}

// Reset forgets the state of the client c.Key under the rule c.Rule,
// resolved as Check resolves them (c.Composite for an Envoy descriptor's
// joined entries; c.Cost is ignored), under each limit that applies to it
// (its plan's, for a key a plan matches), so that its next request
// starts afresh: in the
// store, in the Limiter's local fallback and in its deny cache (see
// sluice.Limiter.Reset). It returns the limits it reset (the rule's
// compiled ones: read, never modify). The error is an *UnknownRuleError,
// one wrapping ErrInvalidKey, or the Limiter's (the store failed).
//
// In a fleet the store is shared, so every replica sees the reset at its
// next decision, except in its deny cache (sluice.WithDenyCache): only
// the replica that served the reset forgets its cached denials of the
// key; each other replica's last until their RetryAfter at most, and it
// keeps denying the key from its cache until then.
func (e *Engine) Reset(ctx context.Context, c Check) ([]sluice.Limit, error) {
	a, err := e.set.Load().check(Check{Rule: c.Rule, Key: c.Key, Composite: c.Composite})
	if err != nil {
		return nil, err
	}
	if err := e.lim.Reset(ctx, a.stored, a.Limits...); err != nil {
		return nil, fmt.Errorf("rule %q: %w", a.Rule.Name, err)
	}
	return a.Limits, nil
}
