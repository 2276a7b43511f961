package sluice

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestInterval(t *testing.T) {
	tests := []struct {
		l    Limit
		want time.Duration
	}{
		{PerMinute(100), 600 * time.Millisecond},
		{PerSecond(5), 200 * time.Millisecond},
		{PerSecond(3), 333334 * time.Microsecond}, // rounded up: never more than 3 per second
		{PerMinute(7), 8571429 * time.Microsecond},
		{Per(1, time.Hour), time.Hour},
	}
	for _, tt := range tests {
		if got := tt.l.Interval(); got != tt.want {
			t.Errorf("%s: Interval() = %v, want %v", tt.l, got, tt.want)
		}
	}
}

func TestCapacity(t *testing.T) {
	tests := []struct {
		l    Limit
		want int
	}{
		{PerSecond(5), 5},
		{PerSecond(5).WithBurst(20), 20},
		{Limit{Limit: 5, Period: time.Second, Burst: 7}, 7}, // zero Algorithm is token_bucket
		{PerSecond(5).Using(GCRA).WithBurst(1), 1},
		{PerSecond(5).Using(SlidingLog), 5},
	}
	for _, tt := range tests {
		if got := tt.l.Capacity(); got != tt.want {
			t.Errorf("%s: Capacity() = %d, want %d", tt.l, got, tt.want)
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range Algorithms {
		if got, err := ParseAlgorithm(string(a)); got != a || err != nil {
			t.Errorf("ParseAlgorithm(%q) = %q, %v", a, got, err)
		}
	}
	_, err := ParseAlgorithm("leaky_bucket")
	if !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("ParseAlgorithm(leaky_bucket) error = %v, want ErrInvalidLimit", err)
	}
	const want = `invalid limit: algorithm "leaky_bucket" is not one of fixed_window, sliding_window, sliding_log, token_bucket, gcra, concurrency`
	if err == nil || err.Error() != want {
		t.Errorf("ParseAlgorithm(leaky_bucket) error = %v, want %s", err, want)
	}
}

func TestParseErrorPolicy(t *testing.T) {
	for name, want := range map[string]ErrorPolicy{"return": ReturnErrors, "allow": AllowOnError, "deny": DenyOnError} {
		p, err := ParseErrorPolicy(name, nil)
		if err != nil || p != want || p.String() != name {
			t.Errorf("ParseErrorPolicy(%q) = %v, %v", name, p, err)
		}
	}
	fallback := &failingStore{}
	if p, err := ParseErrorPolicy("local", fallback); err != nil || p != LocalOnError(fallback) || p.String() != "local" {
		t.Errorf(`ParseErrorPolicy("local", fallback) = %v, %v`, p, err)
	}
	// For a Part, a local policy without a fallback of its own (the
	// Limiter's decides).
	if p, err := ParseErrorPolicy("local", nil); err != nil || p != LocalOnError(nil) {
		t.Errorf(`ParseErrorPolicy("local", nil) = %v, %v, want LocalOnError(nil)`, p, err)
	}
	// The fallback is kept under every policy, for parts whose own is local.
	if p, err := ParseErrorPolicy("deny", fallback); err != nil || p.String() != "deny" || p.fallback != fallback {
		t.Errorf(`ParseErrorPolicy("deny", fallback) = %v, %v, want deny keeping the fallback`, p, err)
	}
	if s := (ErrorPolicy{}).String(); s != "" {
		t.Errorf("the zero ErrorPolicy is %q, want \"\"", s)
	}
	_, err := ParseErrorPolicy("open", nil)
	if want := `sluice: error policy "open" is not one of return, allow, deny, local`; err == nil || err.Error() != want {
		t.Errorf(`ParseErrorPolicy("open") error = %v, want %s`, err, want)
	}
}

func TestLimitString(t *testing.T) {
	tests := []struct {
		l    Limit
		want string
	}{
		{PerSecond(5).WithBurst(20), "token_bucket 5/1s burst 20"},
		{PerMinute(5).Using(SlidingLog).Named("login"), "login: sliding_log 5/1m0s"},
		{Limit{Limit: 1, Period: time.Hour}, "token_bucket 1/1h0m0s"},
	}
	for _, tt := range tests {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestCombine(t *testing.T) {
	allow := func(rem int) Result { return Result{Allowed: true, Remaining: rem} }
	deny := func(retry time.Duration) Result { return Result{RetryAfter: retry} }
	tests := []struct {
		name        string
		rs          []Result
		wantAllowed bool
		wantBinding int
	}{
		{"one", []Result{allow(3)}, true, 0},
		{"fewest remaining binds", []Result{allow(5), allow(2), allow(9)}, true, 1},
		{"first of equals", []Result{allow(2), allow(2)}, true, 0},
		{"the denying one binds", []Result{allow(0), deny(time.Second)}, false, 1},
		{"the longest wait binds", []Result{deny(time.Second), allow(7), deny(time.Minute), deny(time.Millisecond)}, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Combine(tt.rs)
			if m.Allowed != tt.wantAllowed || m.Binding != tt.wantBinding {
				t.Fatalf("combine = Allowed %v Binding %d, want %v %d", m.Allowed, m.Binding, tt.wantAllowed, tt.wantBinding)
			}
			if b := tt.rs[m.Binding]; m.RetryAfter != b.RetryAfter || m.Remaining != b.Remaining {
				t.Errorf("combined Result %+v is not the binding one %+v", m.Result, b)
			}
		})
	}
}

// TestValidateField: Validate's error is a *LimitError naming the field to
// change, wrapping ErrInvalidLimit.
func TestValidateField(t *testing.T) {
	tests := []struct {
		l     Limit
		field string
	}{
		{Limit{Algorithm: "leaky", Limit: 1, Period: time.Second}, "algorithm"},
		{PerSecond(0), "limit"},
		{PerSecond(MaxLogLimit + 1).Using(SlidingLog), "limit"},
		{PerSecond(400000), "limit"}, // a token every 2.5µs
		{Per(1, 0), "period"},
		{Per(1, MaxPeriod+time.Hour), "period"},
		{Per(1, time.Second+time.Nanosecond), "period"},
		{PerSecond(1).WithBurst(-1), "burst"},
		{PerSecond(1).WithBurst(2).Using(FixedWindow), "burst"},
		// Capacity × interval over 2^51µs. (Without a burst it is about
		// Period, which MaxPeriod keeps below that.)
		{Per(1, MaxPeriod).WithBurst(1000), "burst"},
		{PerSecond(1).Named("a b"), "name"},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		var le *LimitError
		if !errors.As(err, &le) || !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%s: Validate() = %v, want a *LimitError wrapping ErrInvalidLimit", tt.l, err)
			continue
		}
		if le.Field != tt.field || le.Limit != tt.l {
			t.Errorf("%s: Validate() field %q, limit %s; want %q, %s", tt.l, le.Field, le.Limit, tt.field, tt.l)
		}
		if want := "invalid limit (" + tt.l.String() + "): " + le.Reason; err.Error() != want {
			t.Errorf("%s: Validate() = %q, want %q", tt.l, err, want)
		}
	}
}

// TestDegradationMadeUp: only the numbers of allow and deny are made up.
func TestDegradationMadeUp(t *testing.T) {
	for d, want := range map[Degradation]bool{NotDegraded: false, DegradedAllow: true, DegradedDeny: true, DegradedLocal: false} {
		if d.MadeUp() != want {
			t.Errorf("%q.MadeUp() = %v, want %v", d, d.MadeUp(), want)
		}
	}
}

// TestValidFastPath: valid, Validate's quick check, agrees with the full
// validation (invalid) on limits at and around every bound, and on random
// ones.
func TestValidFastPath(t *testing.T) {
	algos := append([]Algorithm{"", "leaky_bucket"}, Algorithms...)
	ints := []int{-1, 0, 1, 2, 3, 7, 999, 1000, 1001, MaxLogLimit, MaxLogLimit + 1, 3000, 1 << 30}
	if big := int64(MaxLimit); int64(int(big)) == big { // 64-bit ints
		ints = append(ints, int(big), int(big+1))
	}
	periods := []time.Duration{0, time.Microsecond, MinPeriod - 1, MinPeriod, MinPeriod + time.Nanosecond, time.Second, 3 * time.Second, time.Hour, MaxPeriod, MaxPeriod + time.Microsecond}
	names := []string{"", "a", "search-v1.2_x", "no space", "é", "a:b"}
	check := func(l Limit) {
		t.Helper()
		if got, want := l.valid(), l.invalid() == nil; got != want {
			t.Errorf("%#v: valid() = %v, invalid() = %v", l, got, l.invalid())
		}
	}
	for _, a := range algos {
		for _, n := range ints {
			for _, p := range periods {
				for _, b := range ints {
					check(Limit{Algorithm: a, Limit: n, Period: p, Burst: b})
				}
			}
		}
		for _, name := range names {
			check(Limit{Algorithm: a, Limit: 10, Period: time.Second, Name: name})
		}
	}
	rng := rand.New(rand.NewPCG(12, 34))
	for range 100_000 {
		check(Limit{
			Algorithm: algos[rng.IntN(len(algos))],
			Limit:     int(rng.Int64N(1 << uint(rng.IntN(42)))),
			Period:    time.Duration(rng.Int64N(1 << uint(rng.IntN(59)))),
			Burst:     int(rng.Int64N(1<<uint(rng.IntN(42)))) - 1, // truncated on 32 bits: still a case
		})
	}
}
