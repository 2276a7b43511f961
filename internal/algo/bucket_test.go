package algo

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// exactRescale is debt×to/from rounded up, in exact arithmetic.
func exactRescale(debt, from, to int64) int64 {
	n := new(big.Int).Mul(big.NewInt(debt), big.NewInt(to))
	n.Add(n, big.NewInt(from-1))
	n.Quo(n, big.NewInt(from))
	if n.Cmp(big.NewInt(maxDebt)) > 0 {
		return maxDebt
	}
	return n.Int64()
}

// TestRescale: a converted debt is never less than the exact one (it never
// gives a client more than it had), equals it when whole tokens convert or
// the leftover's product fits in 2^53, is at most 1µs more otherwise, and
// is at most maxDebt.
func TestRescale(t *testing.T) {
	const day = int64(24 * time.Hour / time.Microsecond)
	tests := []struct{ debt, from, to, want int64 }{
		{2_880_000_000, 36_000_000, 24_000_000, 1_920_000_000}, // 80 tokens of 100/h, at 150/h
		{2_880_000_000, 36_000_000, 72_000_000, 5_760_000_000}, // and at 50/h
		{2_870_000_000, 36_000_000, 24_000_000, 1_913_333_334}, // 79 tokens and 26s of one: 17.333…s
		{0, 36_000_000, 24_000_000, 0},
		{1, 36_000_000, 24_000_000, 1},
		{maxDebt - 1, 3e14, 3e14, maxDebt - 1},          // the same interval: as it is
		{maxDebt + 5, 7, 7, maxDebt},                    // a clock back by decades
		{maxDebt, 1, 2, maxDebt},                        // beyond the bound
		{day - 1, day, day / 24, day/24 + 1},            // 1/day to 24/day: exact 3.6e9 - 1/24, rounded up past it (the worst case)
		{day/2 + 1, day, day / 24, day/48 + 1},          // inexact product, rounded as ceil
		{3 * day / 24, day / 24, day, 3 * day},          // whole tokens, large intervals
		{day/24 + 1, day / 24, day, day + 24 + 0},       // 1 + 1/3.6e9 tokens of a day
		{5, 3, 1 << 40, 1<<40 + 733_007_751_851},        // 1 + 2/3 of a token of 2^40µs
		{5, 1, 1 << 49, maxDebt},                        // whole × to beyond the bound
		{12_345_678, 8_571_429, 12_000_000, 17_283_949}, // 7/min to 5/min
	}
	for _, tt := range tests {
		if got := rescale(tt.debt, tt.from, tt.to); got != tt.want {
			t.Errorf("rescale(%d, %d, %d) = %d, want %d", tt.debt, tt.from, tt.to, got, tt.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	maxInterval := int64(sluice.MaxPeriod / time.Microsecond)
	interval := func() int64 {
		// Intervals of every magnitude, from 1µs to MaxPeriod.
		return 1 + rng.Int64N(int64(1)<<rng.IntN(49))%maxInterval
	}
	for range 200_000 {
		from, to := interval(), interval()
		debt := rng.Int64N(int64(1) << rng.IntN(52))
		got, exact := rescale(debt, from, to), exactRescale(debt, from, to)
		part := debt % from
		fits := new(big.Int).Mul(big.NewInt(part), big.NewInt(to)).Cmp(big.NewInt(1<<53)) < 0
		switch {
		case from == to && got != min(debt, maxDebt):
			t.Fatalf("rescale(%d, %d, %d) = %d, want it unchanged", debt, from, to, got)
		case got < exact:
			t.Fatalf("rescale(%d, %d, %d) = %d, below the exact %d: gives the client more than it had", debt, from, to, got, exact)
		case fits && got != exact:
			t.Fatalf("rescale(%d, %d, %d) = %d, want exactly %d", debt, from, to, got, exact)
		case got > min(exact+1, maxDebt):
			t.Fatalf("rescale(%d, %d, %d) = %d, more than 1µs above %d", debt, from, to, got, exact)
		}
	}
}

// TestConvert: only token_bucket and gcra state measured at another
// interval converts, to the same tokens owed, with the debt as its
// lifetime; a debt that has drained converts to no state.
func TestConvert(t *testing.T) {
	const now = 1_767_225_600_000_000
	was := sluice.PerHour(100)                    // a token every 36s
	raised := sluice.PerHour(150)                 // every 24s
	tb := tbState(2_880_000_000, now, 36_000_000) // 80 tokens owed
	gc := gcraState(now+2_880_000_000, 36_000_000)
	tests := []struct {
		name string
		l    sluice.Limit
		st   State
		at   int64
		want State
		ttl  int64
		ok   bool
	}{
		{"token_bucket raised", raised, tb, now, tbState(1_920_000_000, now, 24_000_000), 1_920_000_000, true},
		{"token_bucket later", raised, tb, now + 36_000_000, tbState(1_896_000_000, now+36_000_000, 24_000_000), 1_896_000_000, true},
		{"token_bucket drained", raised, tb, now + 2_880_000_000, State{}, 0, true},
		{"token_bucket same interval", was.WithBurst(300), tb, now, tb, 0, false},
		{"token_bucket no state", raised, State{}, now, State{}, 0, false},
		{"gcra raised", raised.Using(sluice.GCRA), gc, now, gcraState(now+1_920_000_000, 24_000_000), 1_920_000_000, true},
		{"gcra same interval", was.Using(sluice.GCRA), gc, now, gc, 0, false},
		{"fixed_window", raised.Using(sluice.FixedWindow), State{Set: true, A: 5, B: 80}, now, State{Set: true, A: 5, B: 80}, 0, false},
	}
	for _, tt := range tests {
		next, ttl, ok := Convert(tt.l, tt.st, tt.at)
		if ok != tt.ok || ttl != tt.ttl || next.Set != tt.want.Set || next.A != tt.want.A || next.B != tt.want.B || next.C != tt.want.C {
			t.Errorf("%s: Convert = %+v, %d, %v; want %+v, %d, %v", tt.name, next, ttl, ok, tt.want, tt.ttl, tt.ok)
		}
	}
}
