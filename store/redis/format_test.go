//go:build integration

package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// TestForeignFormats: what an algorithm finds at its key that this
// version did not write (the previous versions' "a:b" formats, a layout
// broken by a character, numbers beyond any state) never fails a decision
// nor admits more than the limit: a value of another shape is no state,
// and oversized numbers are capped (a debt of 2^51µs at most).
func TestForeignFormats(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(c)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := sluice.New(store, sluice.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	const maxDebt = time.Duration(1<<51) * time.Microsecond
	tests := []struct {
		alg   sluice.Algorithm
		value string
		fresh bool // read as no state; otherwise denied, within the bounds
	}{
		// The formats of the versions before this one.
		{sluice.FixedWindow, "490896:1", true},
		{sluice.FixedWindow, "490896:100", true},
		{sluice.SlidingWindow, "490896:0:1", true},
		{sluice.SlidingWindow, "490896:1234567890:100000", true},
		{sluice.TokenBucket, "0:1767225600000000", true},
		{sluice.TokenBucket, "3600000000:1767225600000000:36000000", true},
		{sluice.GCRA, "1767229200000000", true},
		{sluice.GCRA, "1767229200000000:36000000", true},
		{sluice.GCRA, "1767229200000000:0", true},
		// This version's layouts, broken.
		{sluice.FixedWindow, "", true},
		{sluice.FixedWindow, "490896", true}, // a window and no count
		{sluice.FixedWindow, "1:0000490896", true},
		{sluice.SlidingWindow, "123456789:0490896", true},   // a length that is not a digit
		{sluice.TokenBucket, "36:1767229200000000", true},   // an exponent that is not a digit
		{sluice.GCRA, "0" + "6" + "1767229200000000", true}, // an interval of 0
		// Numbers beyond any state: a debt capped at 2^51µs.
		{sluice.TokenBucket, "10" + "9999999999999999", false},
		{sluice.GCRA, "10" + "9999999999999999", false},
		{sluice.GCRA, "9999" + "0" + "9999999999999999", false},
	}
	for i, tt := range tests {
		l := sluice.PerHour(100).Using(tt.alg)
		key := "k" + string(rune('a'+i))
		if err := c.Do(ctx, c.B().Set().Key(store.Key(key, l)).Value(tt.value).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		fresh := sluice.Result{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 36 * time.Second}
		if tt.alg != sluice.TokenBucket && tt.alg != sluice.GCRA {
			fresh.ResetAfter = time.Hour // the hour began at now
			if tt.alg == sluice.SlidingWindow {
				fresh.ResetAfter = 2 * time.Hour
			}
		}
		r, err := lim.Allow(ctx, key, l)
		switch {
		case err != nil:
			t.Errorf("%s over %q: %v", tt.alg, tt.value, err)
		case tt.fresh && r != fresh:
			t.Errorf("%s over %q: %+v, want a fresh state %+v", tt.alg, tt.value, r, fresh)
		case !tt.fresh && (r.Allowed || r.Remaining != 0 || r.ResetAfter > maxDebt || r.RetryAfter > maxDebt):
			t.Errorf("%s over %q: %+v, want denied, owing 2^51µs at most", tt.alg, tt.value, r)
		}
	}
}
