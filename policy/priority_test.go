package policy

import (
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
)

// TestCutLimits: a class's share of a capacity is its exact floor, whatever
// float64 makes of 1 less the reserves above it, and at least 1.
func TestCutLimits(t *testing.T) {
	for _, tc := range []struct {
		reserves []float64
		capacity int
		want     int // the lowest class's
	}{
		{[]float64{0.2}, 100, 80},
		{[]float64{0.9}, 100, 10},
		{[]float64{0.93}, 1000, 70},
		{[]float64{0.67}, 1000, 330},
		{[]float64{0.2, 0.1}, 100, 70},
		{[]float64{0.333}, 10, 6},
		{[]float64{0.99}, 10, 1}, // 0.1 of a slot: still one
	} {
		p := &Priority{}
		for i, r := range tc.reserves {
			p.Classes = append(p.Classes, Class{Name: string(rune('a' + i)), Reserve: r})
		}
		for _, l := range []sluice.Limit{sluice.Concurrent(tc.capacity), sluice.PerMinute(tc.capacity).Using(sluice.FixedWindow), sluice.PerMinute(tc.capacity)} {
			got := cutLimits([]sluice.Limit{l}, p.share(len(p.Classes)))[0].Capacity()
			if got != tc.want {
				t.Errorf("reserves %v of %s: the lowest class has %d, want %d", tc.reserves, l, got, tc.want)
			}
		}
	}
}

// TestCompileCostShare: a rule whose cost its lowest class could never
// spend is refused, where the middleware would fail every such request.
func TestCompileCostShare(t *testing.T) {
	rule := func(cost int) []Rule {
		return []Rule{{Name: "pool", Key: Key{Source: KeyGlobal}, Limits: []sluice.Limit{sluice.PerHour(10).Using(sluice.FixedWindow)}, Cost: cost,
			Priority: &Priority{Classes: []Class{{Name: "critical", Reserve: 0.3}}}}}
	}
	if _, err := Compile(rule(7)); err != nil {
		t.Errorf("cost 7 of the lowest class's 7: %v", err)
	}
	_, err := Compile(rule(8))
	if err == nil || !strings.Contains(err.Error(), `cost 8 is more than the lowest class, "default", may use of limit pool-1h (7 of 10)`) {
		t.Errorf("cost 8 of the lowest class's 7: %v, want refused", err)
	}
}
