package algo

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// TestID: IDs are Redis keys, so they must not change without a reason (a
// change starts every client afresh); two limits have equal IDs exactly
// when their Identities are equal, whatever their Limit and Burst.
func TestID(t *testing.T) {
	tests := []struct {
		l              sluice.Limit
		id             string
		param1, param2 int64
	}{
		{sluice.Limit{Limit: 5, Period: time.Second}, "tb:1000000", 200000, 5},
		{sluice.PerSecond(5), "tb:1000000", 200000, 5},
		{sluice.PerSecond(5).WithBurst(5), "tb:1000000", 200000, 5},
		{sluice.PerSecond(5).WithBurst(20), "tb:1000000", 200000, 20},
		{sluice.PerSecond(8), "tb:1000000", 125000, 8},
		{sluice.PerMinute(5), "tb:60000000", 12000000, 5},
		{sluice.PerMinute(7).Using(sluice.GCRA).WithBurst(3).Named("api"), "api:gcra:60000000", 8571429, 3},
		{sluice.PerMinute(9).Using(sluice.GCRA).Named("api"), "api:gcra:60000000", 6666667, 9},
		{sluice.PerMinute(7).Using(sluice.GCRA), "gcra:60000000", 8571429, 7},
		{sluice.PerMinute(100).Using(sluice.FixedWindow), "fw:60000000", 100, 60000000},
		{sluice.PerMinute(150).Using(sluice.FixedWindow), "fw:60000000", 150, 60000000},
		{sluice.PerMinute(100).Using(sluice.SlidingWindow), "sw:60000000", 100, 60000000},
		{sluice.PerHour(10).Using(sluice.SlidingLog).Named("x"), "x:sl:3600000000", 10, 3600000000},
		{sluice.PerHour(10).Using(sluice.SlidingLog).Named("y"), "y:sl:3600000000", 10, 3600000000},
	}
	for _, tt := range tests {
		if got := ID(tt.l); got != tt.id {
			t.Errorf("ID(%s) = %q, want %q", tt.l, got, tt.id)
		}
		if p1, p2 := Params(tt.l); p1 != tt.param1 || p2 != tt.param2 {
			t.Errorf("Params(%s) = %d, %d, want %d, %d", tt.l, p1, p2, tt.param1, tt.param2)
		}
	}
	for _, a := range tests {
		for _, b := range tests {
			if same := a.l.Identity() == b.l.Identity(); same != (ID(a.l) == ID(b.l)) {
				t.Errorf("%s and %s: Identities equal %v, IDs %q and %q", a.l, b.l, same, ID(a.l), ID(b.l))
			}
		}
	}
}
