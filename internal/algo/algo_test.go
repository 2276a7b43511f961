package algo

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// FuzzBucketEqualsGCRA: for any sequence of requests, with time moving
// forwards or backwards, token_bucket and gcra return identical Results and
// keep equivalent state. Each input byte pair is one request: a signed time
// step in seconds and a cost.
func FuzzBucketEqualsGCRA(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 0, 1, 0, 1, 5, 2, 0, 3})
	f.Add([]byte{0, 3, 0, 3, 200, 1, 7, 2, 250, 3, 0, 0, 30, 1})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 255, 1, 255, 2, 60, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		l := sluice.PerMinute(7).WithBurst(3)
		interval, capacity := Params(l)
		var tb, gc State
		now := int64(1_767_225_600_000_000)
		for i := 0; i+1 < len(data); i += 2 {
			now += int64(int8(data[i])) * int64(time.Second/time.Microsecond)
			cost := int64(data[i+1] % 4)
			r1, n1, ttl1 := tokenBucket(tb, now, interval, capacity, cost)
			r2, n2, ttl2 := gcra(gc, now, interval, capacity, cost)
			if r1 != r2 || ttl1 != ttl2 {
				t.Fatalf("request %d (now %d, cost %d): token_bucket %+v ttl %d, gcra %+v ttl %d", i/2, now, cost, r1, ttl1, r2, ttl2)
			}
			if r1.Allowed {
				tb, gc = n1, n2
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
