//go:build integration

package policy_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestStackedHammer: per-address, per-API-key and login rules stacked on
// one request are enforced together and exactly under 8 clients x 32
// goroutines on a real redis-server, each client from its own address:
// whichever rule binds admits exactly its limit, every address at most
// its own, and a denied request spends from none (the counts left equal
// what was admitted). The clock is frozen, so nothing refills.
func TestStackedHammer(t *testing.T) {
	_, srv := openRedis(t)
	const clients, workers, each = 8, 32, 4 // 1024 login attempts
	for _, tt := range []struct {
		name               string
		perIP, perKey, all int
		want               int // admitted in all
	}{
		{"per-address binds", 30, 1000, 1000, clients * 30},
		{"per-key binds", 30, 100, 1000, 100},
		{"login binds", 30, 1000, 150, 150},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := storetest.NewClock()
			s, err := redis.Open("redis://"+srv.Addr, redis.WithPrefix(fmt.Sprintf("hammer%d", tt.perKey+tt.all)))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			f := newFixtureOn(t, sluice.New(s, sluice.WithClock(clock.Now)), clock, []policy.Rule{
				{Name: "per-ip", Limits: []sluice.Limit{sluice.PerHour(tt.perIP).Using(sluice.SlidingLog)}},
				{Name: "per-key", Group: "keys", Match: "/api/", Key: policy.Key{Source: policy.KeyHeader, Name: "X-API-Key"},
					Limits: []sluice.Limit{sluice.PerHour(tt.perKey).Using(sluice.GCRA)}},
				{Name: "login", Group: "auth", Match: "POST /api/auth/login", Key: policy.Key{Source: policy.KeyGlobal},
					Limits: []sluice.Limit{sluice.Per(tt.all, 24*time.Hour).Using(sluice.SlidingWindow)}},
			})
			var total atomic.Int64
			perIP := make([]atomic.Int64, clients)
			var wg sync.WaitGroup
			for c := range clients {
				for range workers {
					wg.Go(func() {
						for range each {
							d, err := f.e.Decide(request("POST", "/api/auth/login", fmt.Sprintf("192.0.2.%d", c+1), "X-API-Key", "team"))
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								total.Add(1)
								perIP[c].Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if got := int(total.Load()); got != tt.want {
				t.Errorf("admitted %d, want exactly %d", got, tt.want)
			}
			for c := range clients {
				n := int(perIP[c].Load())
				if n > tt.perIP {
					t.Errorf("address %d: admitted %d, above its limit %d", c+1, n, tt.perIP)
				}
				if left := f.remaining("per-ip", fmt.Sprintf("192.0.2.%d", c+1)); left[0] != tt.perIP-n {
					t.Errorf("address %d: %d left after %d admitted of %d: a denied request spent", c+1, left[0], n, tt.perIP)
				}
			}
			if left := f.remaining("per-key", "team"); left[0] != tt.perKey-tt.want {
				t.Errorf("per-key: %d left, want %d", left[0], tt.perKey-tt.want)
			}
			if left := f.remaining("login", ""); left[0] != tt.all-tt.want {
				t.Errorf("login: %d left, want %d", left[0], tt.all-tt.want)
			}
		})
	}
}
