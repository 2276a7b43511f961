package algo

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
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
		{sluice.Limit{Limit: 5, Period: time.Second}, "t1s", 200000, 5},
		{sluice.PerSecond(5), "t1s", 200000, 5},
		{sluice.PerSecond(5).WithBurst(5), "t1s", 200000, 5},
		{sluice.PerSecond(5).WithBurst(20), "t1s", 200000, 20},
		{sluice.PerSecond(8), "t1s", 125000, 8},
		{sluice.PerMinute(5), "t1m", 12000000, 5},
		{sluice.PerMinute(7).Using(sluice.GCRA).WithBurst(3).Named("api"), "g1m:api", 8571429, 3},
		{sluice.PerMinute(9).Using(sluice.GCRA).Named("api"), "g1m:api", 6666667, 9},
		{sluice.PerMinute(7).Using(sluice.GCRA), "g1m", 8571429, 7},
		{sluice.PerMinute(100).Using(sluice.FixedWindow), "f1m", 100, 60000000},
		{sluice.PerMinute(150).Using(sluice.FixedWindow), "f1m", 150, 60000000},
		{sluice.PerMinute(100).Using(sluice.SlidingWindow), "w1m", 100, 60000000},
		{sluice.PerHour(10).Using(sluice.SlidingLog).Named("x"), "l1h:x", 10, 3600000000},
		{sluice.PerHour(10).Using(sluice.SlidingLog).Named("y"), "l1h:y", 10, 3600000000},
		{sluice.Per(10, 24*time.Hour).Using(sluice.FixedWindow), "f1d", 10, 86400000000},
		{sluice.Per(10, 36*time.Hour).Using(sluice.FixedWindow), "f36h", 10, 129600000000},
		{sluice.Per(10, 90*time.Second).Using(sluice.SlidingWindow), "w90s", 10, 90000000},
		{sluice.Per(10, 1500*time.Millisecond).Using(sluice.SlidingWindow), "w1500ms", 10, 1500000},
		{sluice.Per(10, 1001*time.Microsecond).Using(sluice.SlidingWindow).Named("a.b-c_d"), "w1001us:a.b-c_d", 10, 1001},
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

// TestIDInjective: IDs are part of Redis keys, so distinct identities must
// never share one. Every ID reads back (parseID) as the Identity it was
// made of, which proves it over the identities drawn: random names,
// algorithms and periods of every magnitude, and the canonical ones.
func TestIDInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"", "a", "1", "1s", "s", "m", "ms", "us", "d", "api", "a.b", "-", "_1m", "1m.2"}
	periods := []time.Duration{time.Millisecond, time.Second, time.Minute, time.Hour, 24 * time.Hour, sluice.MaxPeriod, 60 * time.Second, 1000 * time.Millisecond, 1001 * time.Microsecond, 10 * time.Millisecond}
	seen := make(map[string]sluice.Limit)
	for i := range 100_000 {
		p := periods[i%len(periods)]
		if i >= len(periods)*len(names)*len(sluice.Algorithms) {
			p = sluice.MinPeriod + time.Duration(rng.Int64N(int64(1)<<rng.IntN(49)))*time.Microsecond
			p = min(p, sluice.MaxPeriod)
		}
		l := sluice.Limit{Algorithm: sluice.Algorithms[(i/len(periods))%len(sluice.Algorithms)], Limit: 1, Period: p, Name: names[(i/len(periods)/len(sluice.Algorithms))%len(names)]}
		id := ID(l)
		if back, err := parseID(id); err != nil || back != l.Identity() {
			t.Fatalf("ID(%s) = %q, which reads back as %+v, %v", l, id, back, err)
		}
		if prev, ok := seen[id]; ok && prev.Identity() != l.Identity() {
			t.Fatalf("%s and %s: distinct identities with one ID %q", prev, l, id)
		}
		seen[id] = l
	}
	if len(seen) < 1000 {
		t.Fatalf("only %d distinct IDs: the test drew too few identities", len(seen))
	}
}

// parseID reads an ID back into the Identity it was made of: one letter,
// digits, a unit, and ":" and the name if any.
func parseID(id string) (sluice.Limit, error) {
	var l sluice.Limit
	if id == "" {
		return l, fmt.Errorf("empty ID")
	}
	for _, a := range sluice.Algorithms {
		if keyLetter(a) == id[0] {
			l.Algorithm = a
		}
	}
	if l.Algorithm == "" {
		return l, fmt.Errorf("no algorithm letter %q", id[0])
	}
	rest, name, _ := strings.Cut(id[1:], ":")
	l.Name = name
	digits := strings.TrimRight(rest, "dhmsu")
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || digits[0] == '0' {
		return l, fmt.Errorf("period %q: %v", digits, err)
	}
	for _, u := range periodUnits {
		if u.name == rest[len(digits):] {
			l.Period = time.Duration(n*u.us) * time.Microsecond
			return l, nil
		}
	}
	return l, fmt.Errorf("no unit %q", rest[len(digits):])
}
