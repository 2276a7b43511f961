//go:build integration

package redis_test

import (
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestDenyCacheHammer: 8 replicas with the deny cache (each over its own
// connections) × 32 goroutines hammer one key on Redis with 16 times its
// limit: exactly the limit is admitted, for every algorithm, and Redis
// decides little more than the admitted requests, at most one denial per
// goroutine in flight when its replica first heard one.
func TestDenyCacheHammer(t *testing.T) {
	srv := redistest.Start(t)
	const attempts = 32 // per goroutine: 8192 requests for a limit of 500
	for _, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			var counters []*storetest.Counting
			var lims []*sluice.Limiter
			for _, s := range serverStores(t, srv.Addr, replicas) {
				c := &storetest.Counting{Store: s}
				counters = append(counters, c)
				lims = append(lims, sluice.New(c, sluice.WithDenyCache(0)))
			}
			l := sluice.PerDay(500).Using(a)
			got := storetest.Hammer(t, lims, "hot-deny-"+string(a), goroutines, attempts, l)
			var decided int64
			for _, c := range counters {
				decided += c.Takes()
			}
			t.Logf("%s: %d requests, %d admitted, %d decided by Redis", l, replicas*goroutines*attempts, got, decided)
			if got != 500 {
				t.Errorf("%s admitted %d, want exactly 500", l, got)
			}
			if most := int64(500 + replicas*goroutines); decided > most {
				t.Errorf("Redis decided %d requests, want at most %d: the cache answered too few", decided, most)
			}
		})
	}
}
