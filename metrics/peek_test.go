package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestPeek: the hooks of Metrics time a Limiter's Peek under op="peek",
// apart from the decisions' op="take"; over a store without Peek it
// fails with errors.ErrUnsupported.
func TestPeek(t *testing.T) {
	m := metrics.New()
	lim := sluice.New(memory.New(), sluice.WithHooks(m.Hooks()))
	ctx := context.Background()
	l := sluice.PerMinute(5)
	if _, err := lim.AllowN(ctx, "k", l, 2); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r, err := lim.Peek(ctx, sluice.Part{Key: "k", Limits: []sluice.Limit{l}, Cost: 1})
		if err != nil || !r.Allowed || r.Remaining != 2 {
			t.Fatalf("Peek = %+v, %v; want allowed, 2 left", r.Result, err)
		}
	}
	text := scrape(t, m)
	for _, want := range []string{
		`sluice_store_duration_seconds_count{op="peek"} 3`,
		`sluice_store_duration_seconds_count{op="take"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	hidden := sluice.New(storetest.TakeOnly(memory.New()), sluice.WithHooks(m.Hooks()))
	if _, err := hidden.Peek(ctx, sluice.Part{Key: "k", Limits: []sluice.Limit{l}}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Peek over a store without Peek: %v, want errors.ErrUnsupported", err)
	}
}
