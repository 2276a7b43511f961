package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	sluiceredis "github.com/sluice-go/sluice/store/redis"
)

// TestBucketFormats: what token_bucket and gcra find at their keys that
// this version did not write (the previous version's formats, a zero
// interval, numbers beyond any state) never fails a decision nor admits
// more than the limit: a value of another shape is no state, and
// oversized numbers are capped (a debt of 2^51µs at most).
func TestBucketFormats(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	store := sluiceredis.FromRueidis(c)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := sluice.New(store, sluice.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	fresh := sluice.Result{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 36 * time.Second}
	const maxDebt = time.Duration(1<<51) * time.Microsecond
	tests := []struct {
		alg   sluice.Algorithm
		value string
		fresh bool // read as no state; otherwise denied, within the bounds
	}{
		{sluice.TokenBucket, "0:1767225600000000", true}, // before: tokens:last
		{sluice.GCRA, "1767229200000000", true},          // before: tat
		{sluice.TokenBucket, "3600000000:1767225600000000:0", true},
		{sluice.GCRA, "1767229200000000:0", true},
		{sluice.TokenBucket, "99999999999999999999999:1767225600000000:1", false},
		{sluice.TokenBucket, "5:99999999999999999999999:36000000", false},
		{sluice.GCRA, "99999999999999999999999:36000000", false},
		{sluice.GCRA, "99999999999999999999999:1", false},
	}
	for i, tt := range tests {
		l := sluice.PerHour(100).Using(tt.alg)
		key := "k" + string(rune('a'+i))
		if err := c.Do(ctx, c.B().Set().Key(store.Key(key, l)).Value(tt.value).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		r, err := lim.Allow(ctx, key, l)
		switch {
		case err != nil:
			t.Errorf("%s over %q: %v", tt.alg, tt.value, err)
		case tt.fresh && r != fresh:
			t.Errorf("%s over %q: %+v, want a fresh state %+v", tt.alg, tt.value, r, fresh)
		case !tt.fresh && (r.Allowed || r.Remaining != 0 || r.ResetAfter != maxDebt || r.RetryAfter > maxDebt):
			t.Errorf("%s over %q: %+v, want denied, owing 2^51µs at most", tt.alg, tt.value, r)
		}
	}
}
