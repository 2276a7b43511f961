package algo

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// FuzzBucketEqualsGCRA: for any sequence of requests, with time moving
// forwards or backwards and the limit changing between them (its Limit and
// Burst; the period is its identity), token_bucket and gcra return
// identical Results and keep equivalent state. Each input byte pair is one
// request: a signed time step in seconds, and a byte whose low two bits
// are the cost and whose others pick the limit.
func FuzzBucketEqualsGCRA(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 0, 1, 0, 1, 5, 2, 0, 3})
	f.Add([]byte{0, 3, 0, 3, 200, 1, 7, 2, 250, 3, 0, 0, 30, 1})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 255, 1, 255, 2, 60, 3})
	f.Add([]byte{0, 3, 0, 3, 0, 7, 0, 11, 3, 14, 0, 18, 250, 19, 9, 5, 0, 0})
	variants := []sluice.Limit{
		sluice.PerMinute(7).WithBurst(3),
		sluice.PerMinute(7),
		sluice.PerMinute(5).WithBurst(3),
		sluice.PerMinute(12).WithBurst(6),
		sluice.PerMinute(3).WithBurst(4),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var tb, gc State
		now := int64(1_767_225_600_000_000)
		for i := 0; i+1 < len(data); i += 2 {
			now += int64(int8(data[i])) * int64(time.Second/time.Microsecond)
			cost := int64(data[i+1] % 4)
			l := variants[int(data[i+1]/4)%len(variants)]
			interval, capacity := Params(l)
			// As the stores do: convert what another limit left, then decide.
			if st, _, ok := Convert(l.Using(sluice.TokenBucket), tb, now); ok {
				tb = st
			}
			if st, _, ok := Convert(l.Using(sluice.GCRA), gc, now); ok {
				gc = st
			}
			var o1, o2 Outcome
			tokenBucket(&tb, now, interval, capacity, cost, &o1)
			gcra(&gc, now, interval, capacity, cost, &o2)
			r1, n1, ttl1 := o1.R, o1.Next, o1.TTL
			r2, n2, ttl2 := o2.R, o2.Next, o2.TTL
			if r1 != r2 || ttl1 != ttl2 {
				t.Fatalf("request %d (now %d, %s, cost %d): token_bucket %+v ttl %d, gcra %+v ttl %d", i/2, now, l, cost, r1, ttl1, r2, ttl2)
			}
			if r1.Allowed {
				tb, gc = n1, n2
			}
			if tb.Set != gc.Set || tb.Set && (tb.B+tb.A != gc.A || tb.C != gc.B) {
				t.Fatalf("request %d (now %d, %s, cost %d): token_bucket state %+v, gcra %+v: not the same bucket", i/2, now, l, cost, tb, gc)
			}
		}
	})
}

func TestFloorDiv(t *testing.T) {
	tests := []struct{ a, b, want int64 }{
		{7, 2, 3}, {-7, 2, -4}, {6, 3, 2}, {-6, 3, -2}, {0, 5, 0}, {-1, 5, -1},
	}
	for _, tt := range tests {
		if got := floorDiv(tt.a, tt.b); got != tt.want {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
