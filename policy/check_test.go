package policy_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

// TestCheckShadowImpossibleCost: a rule in shadow mode given a cost it
// could never admit reports its state and would deny, spending nothing,
// beside an enforced rule that decides the request; an enforced rule given
// such a cost is refused, after every other check is resolved.
func TestCheckShadowImpossibleCost(t *testing.T) {
	f := newFixture(t, []policy.Rule{
		{Name: "per-ip", Limits: perHour(5)},
		{Name: "audit", Group: "audit", Limits: perHour(1), Shadow: true},
	})
	ctx := context.Background()
	two := 2
	d, err := f.e.Check(ctx, policy.Check{Rule: "per-ip", Key: "192.0.2.1", Cost: &two}, policy.Check{Rule: "audit", Key: "192.0.2.1", Cost: &two})
	if err != nil || !d.Allowed {
		t.Fatalf("cost 2 under per-ip 5 and shadow audit 1: %+v, %v; want admitted", d, err)
	}
	if got := f.outcomes(); !slices.Equal(got, []string{"per-ip=allowed", "audit=shadow_denied"}) {
		t.Errorf("outcomes %v, want per-ip allowed, audit shadow_denied", got)
	}
	audit := d.Applied[1]
	if r := audit.Result(); audit.Rule.Name != "audit" || r.Allowed || r.Remaining != 1 {
		t.Errorf("audit: %s %+v, want its state (1 left) and a denial", audit.Rule.Name, r)
	}
	if got := f.remaining("audit", "192.0.2.1"); !slices.Equal(got, []int{1}) {
		t.Errorf("audit left %v, want [1]: a look spends nothing", got)
	}
	if got := f.remaining("per-ip", "192.0.2.1"); !slices.Equal(got, []int{3}) {
		t.Errorf("per-ip left %v, want [3]", got)
	}

	six := 6
	_, err = f.e.Check(ctx, policy.Check{Rule: "per-ip", Key: "192.0.2.1", Cost: &six}, policy.Check{Rule: "nope"})
	if _, unknown := errors.AsType[*policy.UnknownRuleError](err); !unknown {
		t.Errorf("an impossible cost beside an unknown rule: %v, want the unknown rule", err)
	}
	_, err = f.e.Check(ctx, policy.Check{Rule: "per-ip", Key: "192.0.2.1", Cost: &six})
	if !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("an impossible cost for an enforced rule: %v, want ErrInvalidCost", err)
	}
}

// TestAppliedResults: a rule's Results are its own (appending to them
// cannot overwrite the next rule's), and Result of a rule without Results
// is the zero Result.
func TestAppliedResults(t *testing.T) {
	f := newFixture(t, []policy.Rule{
		{Name: "per-ip", Limits: perHour(5)},
		{Name: "per-key", Group: "keys", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Key"}, Limits: perHour(3)},
	})
	d := f.decide(request("GET", "/", "192.0.2.1", "X-Key", "k"))
	if len(d.Applied) != 2 {
		t.Fatalf("applied %v, want both rules", applied(d))
	}
	before := d.Applied[1].Results[0]
	_ = append(d.Applied[0].Results, sluice.Result{Remaining: -1})
	if d.Applied[1].Results[0] != before {
		t.Errorf("appending to the first rule's Results changed the second's: %+v", d.Applied[1].Results[0])
	}
	if r := (&policy.Applied{}).Result(); r != (sluice.Result{}) {
		t.Errorf("Result of no Results: %+v, want the zero Result", r)
	}
}
