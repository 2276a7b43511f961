package redis_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

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
			l := benchLimit(a)
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

// BenchmarkScriptCPU reports the Redis server's CPU time per decision
// (INFO commandstats, usec_per_call of EVALSHA) for each algorithm, with an
// INCR-in-a-script baseline: the Lua work, not the network, is what caps a
// Redis server's decisions per second.
//
//	go test -run '^$' -bench ScriptCPU -benchmem ./store/redis/
func BenchmarkScriptCPU(b *testing.B) {
	srv := redistest.Start(b)
	c := newRueidis(b, srv.Addr)
	store := sluiceredis.FromRueidis(c)
	ctx := context.Background()
	measure := func(b *testing.B, run func(i int) error) {
		if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
			b.Fatal(err)
		}
		var next atomic.Int64
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) * 7919
			for pb.Next() {
				i++
				if err := run(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
		stats := commandStats(b, c)
		us, err := strconv.ParseFloat(stats["evalsha"]["usec_per_call"], 64)
		if err != nil {
			b.Fatalf("no evalsha usec_per_call in commandstats: %v (%v)", stats, err)
		}
		b.ReportMetric(us, "redis-µs/decision")
	}
	incr := rueidis.NewLuaScript("return redis.call('INCR', KEYS[1])")
	b.Run("baseline-incr", func(b *testing.B) {
		if err := incr.Exec(ctx, c, []string{"warm"}, nil).Error(); err != nil {
			b.Fatal(err)
		}
		measure(b, func(i int) error {
			return incr.Exec(ctx, c, []string{benchKeyNames[i%benchKeys]}, nil).Error()
		})
	})
	for _, a := range sluice.Algorithms {
		lim := sluice.New(store)
		l := benchLimit(a)
		b.Run(string(a), func(b *testing.B) {
			if _, err := lim.Allow(ctx, "warm", l); err != nil { // load the script
				b.Fatal(err)
			}
			measure(b, func(i int) error {
				_, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l)
				return err
			})
		})
	}
	b.Run("multi-3", func(b *testing.B) {
		lim := sluice.New(store)
		limits := []sluice.Limit{sluice.PerSecond(1_000_000).Using(sluice.GCRA), sluice.PerMinute(1_000_000_000).Using(sluice.SlidingWindow), sluice.PerHour(1_000_000_000).Using(sluice.FixedWindow)}
		if _, err := lim.AllowAll(ctx, "warm", 1, limits...); err != nil {
			b.Fatal(err)
		}
		measure(b, func(i int) error {
			_, err := lim.AllowAll(ctx, benchKeyNames[i%benchKeys], 1, limits...)
			return err
		})
	})
}

// benchLimit admits everything a benchmark sends over 1000 keys: 1e6 per
// second per key (sliding_log: its maximum, 10000 per second).
func benchLimit(a sluice.Algorithm) sluice.Limit {
	if a == sluice.SlidingLog {
		return sluice.PerSecond(sluice.MaxLogLimit).Using(a)
	}
	return sluice.PerSecond(1_000_000).Using(a)
}
