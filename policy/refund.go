package policy

import (
	"context"

	"github.com/sluice-go/sluice"
)

// Refund gives back what earlier requests were charged under the rules
// the checks name, for a caller that learns after a decision that the
// work cost less (Envoy's is_negative_hits): each check's cost (the rule's
// when Cost is nil) from each of its rule's limits, rules in shadow mode
// included, in one call of sluice.Limiter.Refund, whose rules it follows:
// a refund whose take is not known. A cost above what a limit could ever
// admit gives back the most any request could have taken, the smallest
// capacity of the rule's limits.
//
// The Decision is allowed, each Applied holding the state after the
// refund (Outcome Allowed); nothing is told to the Observer, since a
// refund decides nothing, and the SettleObserver is told of the units
// given back. The errors are Check's for a check that names
// no rule, a key its rule refuses or a repeated check, and Limiter.Refund's
// (a store failure, or errors.ErrUnsupported): no error policy
// answers for a refund.
func (e *Engine) Refund(ctx context.Context, checks ...Check) (*Decision, error) {
	applied, err := e.set.Load().resolve(checks)
	if err != nil {
		return nil, err
	}
	d := &Decision{Allowed: true, binding: -1, Applied: applied, enforced: len(applied)}
	parts := make([]sluice.Part, len(applied))
	for i := range applied {
		a := &applied[i]
		parts[i] = sluice.Part{Key: a.stored, Limits: a.Limits, Cost: min(a.Cost, minCapacity(a.Limits))}
	}
	res, err := e.lim.Refund(ctx, parts...)
	if err != nil {
		return nil, err
	}
	off := 0
	for i := range applied {
		a := &applied[i]
		a.Results = res.Results[off : off+len(a.Limits) : off+len(a.Limits)]
		off += len(a.Limits)
		a.Binding = sluice.Combine(a.Results).Binding
		a.Outcome = Allowed
		if parts[i].Cost > 0 {
			e.settled(a.Rule.Name, parts[i].Cost, 0)
		}
	}
	return d, nil
}
