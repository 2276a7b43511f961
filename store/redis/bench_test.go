package redis_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	sluiceredis "github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/redis/goredis"
)

const benchKeys = 1000

var benchKeyNames = func() []string {
	k := make([]string, benchKeys)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// BenchmarkAllow measures one admitted decision per algorithm and client
// against a local redis-server, from one goroutine (a round trip each) and
// from many (rueidis pipelines them automatically):
//
//	go test -run '^$' -bench Allow -benchmem ./store/redis/
func BenchmarkAllow(b *testing.B) {
	srv := redistest.Start(b)
	clients := []struct {
		name  string
		store sluice.Store
	}{
		{"rueidis", sluiceredis.FromRueidis(newRueidis(b, srv.Addr))},
		{"go-redis", goredis.New(newGoRedis(b, srv.Addr))},
	}
	for _, c := range clients {
		for _, a := range sluice.Algorithms {
			l := sluice.PerSecond(1_000_000).Using(a)
			lim := sluice.New(c.store)
			ctx := context.Background()
			b.Run(c.name+"/"+string(a)+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if _, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(c.name+"/"+string(a)+"/parallel", func(b *testing.B) {
				var next atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(16) // requests in flight, as a busy service has
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(1)) * 7919
					for pb.Next() {
						i++
						if _, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
