package algo

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// TestID: IDs are Redis keys already in use, so they must not change; and
// two limits have equal IDs exactly when their Normalized forms are equal.
func TestID(t *testing.T) {
	tests := []struct {
		l              sluice.Limit
		id             string
		param1, param2 int64
	}{
		{sluice.Limit{Limit: 5, Period: time.Second}, "tb:5:1000000:5", 200000, 5},
		{sluice.PerSecond(5), "tb:5:1000000:5", 200000, 5},
		{sluice.PerSecond(5).WithBurst(5), "tb:5:1000000:5", 200000, 5},
		{sluice.PerSecond(5).WithBurst(20), "tb:5:1000000:20", 200000, 20},
		{sluice.PerMinute(7).Using(sluice.GCRA).WithBurst(3).Named("api"), "api:gcra:7:60000000:3", 8571429, 3},
		{sluice.PerMinute(100).Using(sluice.FixedWindow), "fw:100:60000000", 100, 60000000},
		{sluice.PerMinute(100).Using(sluice.SlidingWindow), "sw:100:60000000", 100, 60000000},
		{sluice.PerHour(10).Using(sluice.SlidingLog).Named("x"), "x:sl:10:3600000000", 10, 3600000000},
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
			if same := a.l.Normalized() == b.l.Normalized(); same != (ID(a.l) == ID(b.l)) {
				t.Errorf("%s and %s: Normalized equal %v, IDs %q and %q", a.l, b.l, same, ID(a.l), ID(b.l))
			}
		}
	}
}
