//go:build integration

// Package bench compares sluice with peer rate-limiting libraries. It is a
// module of its own so that the peers stay out of sluice's go.mod; see
// README.md for how to run it and for measured results.
package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/bench/internal/peers"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/redis/goredis"
)

// keySpace is how many client keys every benchmark cycles through, one per
// iteration, so that each call reads and writes existing per-key state.
const keySpace = peers.KeySpace

var keys = peers.Keys

// Every limiter admits 1e6 requests per second per key with a burst of 1e6
// (sluice's sliding_log: its maximum, 10000 per second), which no run comes
// near over 1000 keys: the benchmarks measure the admitted path, the common
// case of a rate limiter.
const (
	admitRate   = 1_000_000
	admitPeriod = time.Second
)

func sluiceLimit(a sluice.Algorithm) sluice.Limit {
	if a == sluice.SlidingLog {
		return sluice.Limit{Algorithm: a, Limit: sluice.MaxLogLimit, Period: admitPeriod}
	}
	return sluice.Limit{Algorithm: a, Limit: admitRate, Period: admitPeriod}
}

// redisParallelism is the b.SetParallelism of the parallel Redis
// benchmarks: 8 × GOMAXPROCS goroutines, so that the clients have
// concurrent requests to pipeline (rueidis) or spread over their pool
// (go-redis), as in a server handling many requests at once.
const redisParallelism = 8

// allowFunc decides one request of cost 1 by key and reports whether it was
// admitted.
type allowFunc = peers.Allow

// sluiceAllow decides with a sluice Limiter under limit.
var sluiceAllow = peers.Sluice

// run benchmarks the limiter that setup returns, as name/serial and
// name/parallel. setup runs once per measurement, outside the timer; every
// key is then decided once before timing starts so that the timed calls
// find existing state. parallelism is passed to b.SetParallelism.
func run(b *testing.B, name string, parallelism int, setup func(b *testing.B) allowFunc) {
	ctx := context.Background()
	warm := func(b *testing.B, allow allowFunc) {
		for _, k := range keys {
			if ok, err := allow(ctx, k); err != nil || !ok {
				b.Fatalf("warm-up on %q: allowed %v, error %v", k, ok, err)
			}
		}
	}
	b.Run(name+"/serial", func(b *testing.B) {
		allow := setup(b)
		warm(b, allow)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := keys[i%keySpace]
			if ok, err := allow(ctx, k); err != nil || !ok {
				b.Fatalf("%q: allowed %v, error %v", k, ok, err)
			}
		}
	})
	b.Run(name+"/parallel", func(b *testing.B) {
		allow := setup(b)
		warm(b, allow)
		var goroutines atomic.Int64
		b.SetParallelism(parallelism)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			// Spread the goroutines over the key space.
			i := int(goroutines.Add(1)) * 397
			for ; pb.Next(); i++ {
				k := keys[i%keySpace]
				if ok, err := allow(ctx, k); err != nil || !ok {
					b.Errorf("%q: allowed %v, error %v", k, ok, err)
					return
				}
			}
		})
	})
}

// BenchmarkRedis compares sluice's Redis store, over rueidis and over
// go-redis, with github.com/go-redis/redis_rate (GCRA over go-redis), all
// against one redis-server on loopback started for this benchmark.
//
// Every measurement gets new clients with default options. A rueidis client
// answers a lone caller synchronously on its connection, but once it has
// seen concurrent calls it hands every later call to its pipelining
// goroutines; fresh clients keep a serial measurement from depending on
// which benchmark ran before it.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b) // stopped when BenchmarkRedis ends

	newRueidis := func(b *testing.B) rueidis.Client {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		return c
	}
	newGoRedis := func(b *testing.B) *goredislib.Client {
		c := goredislib.NewClient(&goredislib.Options{Addr: srv.Addr})
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	// Every measurement gets its own key prefix, so that none finds state
	// left by another.
	var stores atomic.Int64
	prefix := func() string { return "bench" + strconv.FormatInt(stores.Add(1), 10) }

	run(b, "redis_rate", redisParallelism, func(b *testing.B) allowFunc {
		l := redis_rate.NewLimiter(newGoRedis(b))
		limit := redis_rate.Limit{Rate: admitRate, Burst: admitRate, Period: admitPeriod}
		p := prefix() + ":"
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, p+key, limit)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}
	})
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog} {
		run(b, "sluice-"+string(a)+"-rueidis", redisParallelism, func(b *testing.B) allowFunc {
			store := redis.FromRueidis(newRueidis(b), redis.WithPrefix(prefix()))
			return sluiceAllow(sluice.New(store), sluiceLimit(a))
		})
		run(b, "sluice-"+string(a)+"-goredis", redisParallelism, func(b *testing.B) allowFunc {
			store := goredis.New(newGoRedis(b), redis.WithPrefix(prefix()))
			return sluiceAllow(sluice.New(store), sluiceLimit(a))
		})
	}
}

// BenchmarkMemory compares sluice's in-process store with
// golang.org/x/time/rate.
//
// The comparison is indicative only: x/time/rate is a single-process token
// bucket for one stream of events, with no store of many keys, no expiry of
// idle keys and no other algorithm. The two x/time/rate variants hold one
// *rate.Limiter per key the way an application would, in a sync.Map or in a
// map behind a mutex, and never evict; sluice's memory store shards its
// map, gives every piece of state a lifetime and evicts expired state as it
// goes.
func BenchmarkMemory(b *testing.B) {
	newRate := func() *rate.Limiter { return rate.NewLimiter(rate.Limit(admitRate), admitRate) }

	run(b, "x-time-rate-syncmap", 1, func(b *testing.B) allowFunc {
		return peers.SyncMapRate(newRate)
	})
	run(b, "x-time-rate-mutexmap", 1, func(b *testing.B) allowFunc {
		var mu sync.Mutex
		m := make(map[string]*rate.Limiter)
		return func(_ context.Context, key string) (bool, error) {
			mu.Lock()
			l := m[key]
			if l == nil {
				l = newRate()
				m[key] = l
			}
			mu.Unlock()
			return l.Allow(), nil
		}
	})
	run(b, "ulule-memory", 1, func(b *testing.B) allowFunc {
		return peers.Ulule(ululememory.NewStore(), admitRate, admitPeriod)
	})
	run(b, "throttled-memstore", 1, func(b *testing.B) allowFunc {
		return throttledAllow(b, admitRate, admitPeriod)
	})
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog} {
		run(b, "sluice-"+string(a), 1, func(b *testing.B) allowFunc {
			return sluiceAllow(sluice.New(memory.New()), sluiceLimit(a))
		})
	}
}

// throttledAllow decides with github.com/throttled/throttled's GCRA over
// its in-memory store (no key bound): n per period, a burst of n.
func throttledAllow(b *testing.B, n int, period time.Duration) allowFunc {
	allow, err := peers.ThrottledMemory(n, period)
	if err != nil {
		b.Fatal(err)
	}
	return allow
}

// lastingN per lastingPeriod, with a burst of lastingN, admits far more
// than any run sends one key (2^30, which fits an int on 32-bit
// platforms too) and keeps the state for the whole run: a token bucket or
// GCRA under it spends one token, 294 ms of its schedule, per request, so
// a key's state outlives the run instead of expiring between requests as
// it does at 1e6 per second.
const (
	lastingN      = 1 << 30
	lastingPeriod = sluice.MaxPeriod
)

// lastingLimit is lastingN per lastingPeriod for sluice.
var lastingLimit = sluice.Limit{Limit: lastingN, Period: lastingPeriod}

// lastingRate is lastingLimit for x/time/rate.
func lastingRate() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(float64(lastingN)/lastingPeriod.Seconds()), lastingN)
}

// BenchmarkMemoryOneKey is one key's decision in process: sluice's memory
// store (the four algorithms that take lastingLimit) beside one bare
// *rate.Limiter of golang.org/x/time/rate, the fastest a token bucket in
// Go gets, x/time/rate behind a sync.Map as an application keys it, and
// ulule/limiter's and throttled's memory stores.
func BenchmarkMemoryOneKey(b *testing.B) {
	oneKey(b, "x-time-rate", func(b *testing.B) allowFunc {
		l := lastingRate()
		return func(context.Context, string) (bool, error) { return l.Allow(), nil }
	})
	oneKey(b, "x-time-rate-syncmap", func(b *testing.B) allowFunc {
		return peers.SyncMapRate(lastingRate)
	})
	oneKey(b, "ulule-memory", func(b *testing.B) allowFunc {
		return peers.Ulule(ululememory.NewStore(), lastingN, lastingPeriod)
	})
	oneKey(b, "throttled-memstore", func(b *testing.B) allowFunc {
		return throttledAllow(b, lastingN, lastingPeriod)
	})
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.FixedWindow, sluice.SlidingWindow} {
		oneKey(b, "sluice-"+string(a), func(b *testing.B) allowFunc {
			return sluiceAllow(sluice.New(memory.New()), lastingLimit.Using(a))
		})
	}
}

// oneKey benchmarks setup's limiter on one key, serially and with
// GOMAXPROCS goroutines.
func oneKey(b *testing.B, name string, setup func(b *testing.B) allowFunc) {
	ctx := context.Background()
	for _, parallel := range []bool{false, true} {
		b.Run(name+"/"+map[bool]string{false: "serial", true: "parallel"}[parallel], func(b *testing.B) {
			allow := setup(b)
			if ok, err := allow(ctx, "client-1"); err != nil || !ok {
				b.Fatalf("warm-up: allowed %v, error %v", ok, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if !parallel {
				for b.Loop() {
					if ok, err := allow(ctx, "client-1"); err != nil || !ok {
						b.Fatalf("allowed %v, error %v", ok, err)
					}
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if ok, err := allow(ctx, "client-1"); err != nil || !ok {
						b.Errorf("allowed %v, error %v", ok, err)
						return
					}
				}
			})
		})
	}
}

// millionKeys is the key space of BenchmarkMemory1M.
const millionKeys = 1 << 20

// BenchmarkMemory1M decides over 2^20 keys (cycled, under lastingLimit, so
// that every key's state lives), serially and with GOMAXPROCS goroutines:
// whether the memory store's throughput scales with the cores over many
// keys. The store is built and every key decided once per count, outside
// the timer, and shared by the serial and parallel runs.
func BenchmarkMemory1M(b *testing.B) {
	ks := peers.ClientKeys(millionKeys)
	// Each store's sub-benchmark warms it, so that -bench can select one
	// store (and a profile of it holds no other store's warm-up).
	bench := func(b *testing.B, name string, newAllow func() allowFunc) {
		b.Run(name, func(b *testing.B) {
			allow := newAllow()
			ctx := context.Background()
			for _, k := range ks {
				if ok, err := allow(ctx, k); err != nil || !ok {
					b.Fatalf("warm-up on %q: allowed %v, error %v", k, ok, err)
				}
			}
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if ok, err := allow(ctx, ks[i%millionKeys]); err != nil || !ok {
						b.Fatalf("allowed %v, error %v", ok, err)
					}
				}
			})
			b.Run("parallel", func(b *testing.B) {
				var goroutines atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(goroutines.Add(1)) * (millionKeys / 7)
					for ; pb.Next(); i++ {
						if ok, err := allow(ctx, ks[i%millionKeys]); err != nil || !ok {
							b.Errorf("allowed %v, error %v", ok, err)
							return
						}
					}
				})
			})
		})
	}
	bench(b, "x-time-rate-syncmap", func() allowFunc {
		return peers.SyncMapRate(lastingRate)
	})
	bench(b, "sluice-gcra", func() allowFunc {
		return sluiceAllow(sluice.New(memory.New(memory.WithCapacity(2*millionKeys))), lastingLimit.Using(sluice.GCRA))
	})
}
