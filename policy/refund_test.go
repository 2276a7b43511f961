package policy_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sluice-go/sluice/policy"
)

// TestRefund: Engine.Refund gives each check's cost back under its rule,
// a rule in shadow mode included, capped at the rule's capacity, tells
// the observer nothing, and refuses a check naming no rule before giving
// anything back.
func TestRefund(t *testing.T) {
	f := newFixture(t, []policy.Rule{
		{Name: "per-ip", Limits: perHour(5)},
		{Name: "audit", Group: "audit", Limits: perHour(3), Shadow: true},
	})
	ctx := context.Background()
	three := 3
	both := []policy.Check{{Rule: "per-ip", Key: "192.0.2.1", Cost: &three}, {Rule: "audit", Key: "192.0.2.1", Cost: &three}}
	if d, err := f.e.Check(ctx, both...); err != nil || !d.Allowed {
		t.Fatalf("cost 3 under per-ip 5 and audit 3: %+v, %v", d, err)
	}
	f.outcomes() // the spends', drained
	two, nine := 2, 9
	d, err := f.e.Refund(ctx, policy.Check{Rule: "per-ip", Key: "192.0.2.1", Cost: &two}, policy.Check{Rule: "audit", Key: "192.0.2.1", Cost: &nine})
	if err != nil || !d.Allowed || len(d.Applied) != 2 {
		t.Fatalf("Refund: %+v, %v", d, err)
	}
	if r := d.Applied[0].Result(); d.Applied[0].Rule.Name != "per-ip" || r.Remaining != 4 || d.Applied[0].Outcome != policy.Allowed {
		t.Errorf("per-ip after a refund of 2: %+v (%v), want 4 remaining, allowed", r, d.Applied[0].Outcome)
	}
	if got := f.remaining("per-ip", "192.0.2.1"); !slices.Equal(got, []int{4}) {
		t.Errorf("per-ip left %v, want [4]", got)
	}
	if got := f.remaining("audit", "192.0.2.1"); !slices.Equal(got, []int{3}) {
		t.Errorf("audit left %v, want [3]: a refund of 9 gives back its capacity, 3", got)
	}
	if got := f.outcomes(); len(got) != 0 {
		t.Errorf("outcomes after the refund %v, want none: a refund decides nothing", got)
	}
	if _, err := f.e.Refund(ctx, policy.Check{Rule: "per-ip", Key: "192.0.2.1"}, policy.Check{Rule: "nonesuch", Key: "x"}); err == nil {
		t.Error("Refund naming no rule: no error")
	}
	if got := f.remaining("per-ip", "192.0.2.1"); !slices.Equal(got, []int{4}) {
		t.Errorf("per-ip left %v after a refused refund, want [4]: nothing given back", got)
	}
}
