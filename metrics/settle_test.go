package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestSettle: a Limiter with the hooks of Metrics reserves and settles,
// the take timed under op="take", the refund under op="refund" and the
// charge under op="charge"; over a store that cannot settle, Reserve
// fails with errors.ErrUnsupported.
func TestSettle(t *testing.T) {
	m := metrics.New()
	lim := sluice.New(memory.New(), sluice.WithHooks(m.Hooks()))
	ctx := context.Background()
	l := sluice.PerMinute(100)
	for _, c := range []struct {
		actual, remaining int
	}{
		{4, 96},  // 10 reserved, 6 refunded
		{25, 71}, // 10 reserved, 15 charged
	} {
		r, err := lim.Reserve(ctx, "k", l, 10)
		if err != nil || !r.Allowed {
			t.Fatalf("Reserve = %+v, %v", r, err)
		}
		got, err := r.Settle(ctx, c.actual)
		if err != nil || got.Remaining != c.remaining {
			t.Fatalf("Settle(%d) = %+v, %v; want %d remaining", c.actual, got.Result, err, c.remaining)
		}
	}
	text := scrape(t, m)
	for _, want := range []string{
		`sluice_store_duration_seconds_count{op="take"} 2`,
		`sluice_store_duration_seconds_count{op="refund"} 1`,
		`sluice_store_duration_seconds_count{op="charge"} 1`,
		`sluice_store_errors_total{op="refund"} 0`,
		`sluice_store_errors_total{op="charge"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	hidden := sluice.New(storetest.TakeOnly(memory.New()), sluice.WithHooks(m.Hooks()))
	if _, err := hidden.Reserve(ctx, "k", l, 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reserve over a store that cannot settle: %v, want errors.ErrUnsupported", err)
	}
}

// TestSettledUnits: an engine told to report to Settled counts, by rule,
// the units its settles gave back and charged and its refunds gave back.
func TestSettledUnits(t *testing.T) {
	m := metrics.New()
	set, err := policy.Compile([]policy.Rule{{Name: "budget", Key: policy.Key{Source: policy.KeyRequest}, Limits: []sluice.Limit{sluice.PerHour(10_000)},
		Cost: 100, Settle: &policy.Settle{CostFrom: policy.CostSource{Header: "X-Tokens-Used"}}}})
	if err != nil {
		t.Fatal(err)
	}
	e := policy.New(sluice.New(memory.New(), sluice.WithHooks(m.Hooks())), set, policy.WithSettleObserver(m.Settled))
	ctx := context.Background()
	for _, n := range []int{30, 250} {
		d, err := e.Check(ctx, policy.Check{Rule: "budget", Key: "k"})
		if err != nil || !d.Allowed {
			t.Fatalf("Check: %+v, %v", d, err)
		}
		if err := d.Settle(ctx, func(*policy.Applied) (int, bool) { return n, true }); err != nil {
			t.Fatal(err)
		}
	}
	five := 5
	if _, err := e.Refund(ctx, policy.Check{Rule: "budget", Key: "k", Cost: &five}); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, m)
	for _, want := range []string{
		`sluice_settled_units_total{kind="refunded",rule="budget"} 75`,
		`sluice_settled_units_total{kind="charged",rule="budget"} 150`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
