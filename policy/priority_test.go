package policy

import (
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
