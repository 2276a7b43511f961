//go:build integration

package redis_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
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
		{"rueidis", redis.FromRueidis(newRueidis(b, srv.Addr))},
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
				b.ReportAllocs()
				b.SetParallelism(16) // requests in flight, as a busy service has
				runParallel(b, func(i int) error {
					_, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l)
					return err
				})
			})
		}
	}
}

// BenchmarkClusterAllow measures one admitted decision on a 3-master
// Redis Cluster through a Limiter with an error policy (so with its
// circuit breaker and store timeout), from one goroutine and from 16:
//
//	go test -run '^$' -bench ClusterAllow -benchmem ./store/redis/
func BenchmarkClusterAllow(b *testing.B) {
	c := redistest.StartCluster(b)
	lim := sluice.New(redis.FromRueidis(newRueidis(b, c.Addrs...)), sluice.WithErrorPolicy(sluice.AllowOnError))
	l := benchLimit(sluice.GCRA)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if r, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l); err != nil || r.Degraded != sluice.NotDegraded {
				b.Fatal(r, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(8) // 16 callers on 2 cores
		runParallel(b, func(i int) error {
			_, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l)
			return err
		})
	})
}

// BenchmarkScriptCPU reports the Redis server's CPU time per decision
// (INFO commandstats: the usec of EVALSHA and EVAL over the decisions) for
// each algorithm, at 32 callers (coalesced by default), with an
// INCR-in-a-script baseline: the Lua work, not the network, is what caps a
// Redis server's decisions per second.
//
//	go test -run '^$' -bench ScriptCPU -benchmem ./store/redis/
func BenchmarkScriptCPU(b *testing.B) {
	srv := redistest.Start(b)
	c := newRueidis(b, srv.Addr)
	store := redis.FromRueidis(c)
	ctx := context.Background()
	measure := func(b *testing.B, run func(i int) error) {
		if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
			b.Fatal(err)
		}
		b.SetParallelism(16)
		runParallel(b, run)
		b.ReportMetric(scriptUsec(b, c)/float64(b.N), "redis-µs/decision")
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

// runParallel runs run in b's parallel goroutines, each on its own run of
// indexes i (spread over the keys), until b.N calls; it reports the first
// error of each goroutine and stops that goroutine.
func runParallel(b *testing.B, run func(i int) error) {
	var next atomic.Int64
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
}

// benchLimit admits everything a benchmark sends over 1000 keys: 1e6 per
// second per key (sliding_log: its maximum, 10000 per second).
func benchLimit(a sluice.Algorithm) sluice.Limit {
	if a == sluice.SlidingLog {
		return sluice.PerSecond(sluice.MaxLogLimit).Using(a)
	}
	return sluice.PerSecond(1_000_000).Using(a)
}

// scriptUsec returns the Redis server's CPU time in script calls (EVALSHA
// and EVAL, INFO commandstats) since CONFIG RESETSTAT, in µs.
func scriptUsec(b *testing.B, c rueidis.Client) float64 {
	b.Helper()
	stats := commandStats(b, c)
	total := 0.0
	for _, cmd := range []string{"evalsha", "eval"} {
		if u, ok := stats[cmd]["usec"]; ok {
			us, err := strconv.ParseFloat(u, 64)
			if err != nil {
				b.Fatalf("commandstats %s usec %q: %v", cmd, u, err)
			}
			total += us
		}
	}
	if total == 0 {
		b.Fatalf("no script call in commandstats: %v", stats)
	}
	return total
}

// scriptCallCount returns how many script calls (EVALSHA and EVAL) the
// server ran since CONFIG RESETSTAT.
func scriptCallCount(b *testing.B, c rueidis.Client) int {
	b.Helper()
	stats := commandStats(b, c)
	n := 0
	for _, cmd := range []string{"evalsha", "eval"} {
		k, _ := strconv.Atoi(stats[cmd]["calls"])
		n += k
	}
	return n
}

// BenchmarkCoalesce compares a Store that coalesces concurrent decisions
// (the default) with one that does not (WithBatch(1)), each algorithm,
// 1000 keys, every decision admitted: at 256 callers (gcra also at 16 and
// 4 and through go-redis), the Redis server's CPU per decision (redis-µs/decision), script
// calls per decision and ns/op (wall time per decision: 1e9/ns/op
// decisions per second); from one caller, the median latency (p50-µs)
// beside ns/op. The sub-benchmarks
// alternate on and off, so -count interleaves them:
//
//	go test -run '^$' -bench Coalesce -benchtime 20000x -count 6 ./store/redis/
func BenchmarkCoalesce(b *testing.B) {
	srv := redistest.Start(b)
	admin := newRueidis(b, srv.Addr)
	ctx := context.Background()
	modes := []struct {
		name string
		opts []redis.Option
	}{
		{"on", nil},
		{"off", []redis.Option{redis.WithBatch(1)}},
	}
	type level struct {
		callers int
		alg     sluice.Algorithm
		client  string // "" for rueidis
	}
	var levels []level
	for _, a := range sluice.Algorithms {
		levels = append(levels, level{256, a, ""})
	}
	levels = append(levels, level{256, sluice.GCRA, "go-redis"}, level{16, sluice.GCRA, ""}, level{4, sluice.GCRA, ""})
	for _, lv := range levels {
		l := benchLimit(lv.alg)
		for _, m := range modes {
			store := redis.FromRueidis(newRueidis(b, srv.Addr), m.opts...)
			name := strconv.Itoa(lv.callers) + "/" + string(lv.alg) + "/" + m.name
			if lv.client != "" {
				store = goredis.New(newGoRedis(b, srv.Addr), m.opts...)
				name = strconv.Itoa(lv.callers) + "/" + lv.client + "/" + string(lv.alg) + "/" + m.name
			}
			lim := sluice.New(store)
			b.Run(name, func(b *testing.B) {
				if _, err := lim.Allow(ctx, "warm", l); err != nil { // load the scripts
					b.Fatal(err)
				}
				if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetParallelism(max(1, lv.callers/runtime.GOMAXPROCS(0)))
				runParallel(b, func(i int) error {
					_, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l)
					return err
				})
				b.StopTimer()
				b.ReportMetric(scriptUsec(b, admin)/float64(b.N), "redis-µs/decision")
				b.ReportMetric(float64(scriptCallCount(b, admin))/float64(b.N), "calls/decision")
			})
		}
	}
	for _, m := range modes {
		lim := sluice.New(redis.FromRueidis(newRueidis(b, srv.Addr), m.opts...))
		l := benchLimit(sluice.GCRA)
		b.Run("1/gcra/"+m.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				if _, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		})
	}
}

// BenchmarkSettle compares a reserve and its settle (Limiter.Reserve of
// cost 2, Reservation.Settle at 1, one call) with one decision (Allow) on
// the same store, fixed_window (whose refund writes) and gcra (whose
// refund, under a limit that refills 2 in 2µs, gives back nothing), 1000
// keys, 256 callers: ns/op (wall time per call), the Redis server's
// script CPU per call (redis-µs/call) and script calls per call. The
// sub-benchmarks alternate, so -count interleaves them; make bench
// measures the same pair as whole processes (bench/cmd/libbench):
//
//	go test -run '^$' -bench Settle -benchtime 40000x -count 6 ./store/redis/
func BenchmarkSettle(b *testing.B) {
	srv := redistest.Start(b)
	admin := newRueidis(b, srv.Addr)
	ctx := context.Background()
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA} {
		l := benchLimit(a)
		for _, mode := range []string{"allow", "reserve+settle"} {
			lim := sluice.New(redis.FromRueidis(newRueidis(b, srv.Addr)))
			call := func(i int) error {
				_, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l)
				return err
			}
			if mode != "allow" {
				call = func(i int) error {
					r, err := lim.Reserve(ctx, benchKeyNames[i%benchKeys], l, 2)
					if err != nil {
						return err
					}
					_, err = r.Settle(ctx, 1)
					return err
				}
			}
			b.Run(string(a)+"/"+mode, func(b *testing.B) {
				if err := call(0); err != nil { // load the scripts
					b.Fatal(err)
				}
				if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetParallelism(256 / runtime.GOMAXPROCS(0))
				runParallel(b, call)
				b.StopTimer()
				b.ReportMetric(scriptUsec(b, admin)/float64(b.N), "redis-µs/call")
				b.ReportMetric(float64(scriptCallCount(b, admin))/float64(b.N), "calls/call")
			})
		}
	}
}

// BenchmarkSlots compares a concurrency slot's acquire and release
// (Limiter.Acquire under sluice.Concurrent, then Reservation.Release:
// two calls, the release a refund of the slot by lua/refund.lua) with one
// decision (Allow, gcra) on the same server, 1000 keys, 256 callers:
// ns/op (wall time per acquire+release, or per decision), allocs, the
// Redis server's script CPU per op (redis-µs/op, INFO commandstats: the
// usec of EVALSHA and EVAL), its process CPU per op (redis-cpu-µs/op,
// INFO CPU: used_cpu_user and used_cpu_sys, socket I/O included) and
// script calls per op. The concurrency limit has a slot for every caller
// on one key, so every acquire is admitted (a denial fails the
// benchmark).
//
// An acquire+release run also decides b.N times with gcra at the same
// callers, untimed, half just before its timed part and half just after,
// and reports its Redis CPU per op over theirs: cpu-ratio (process) and
// script-ratio (script time), the goal being a cpu-ratio of at
// most 2.2. Those decisions are paired with the run, so that a machine
// whose load drifts between sub-benchmarks (which -count repeats one
// after another, never interleaved) does not move the ratio. make bench
// measures the same pair as whole processes (bench/cmd/libbench):
//
//	go test -run '^$' -bench Slots -benchtime 20000x -count 3 ./store/redis/
func BenchmarkSlots(b *testing.B) {
	srv := redistest.Start(b)
	admin := newRueidis(b, srv.Addr)
	ctx := context.Background()
	slot := sluice.Concurrent(sluice.MaxLogLimit)
	rate := benchLimit(sluice.GCRA)
	const callers = 256
	decider := func() func(i int) error {
		lim := sluice.New(redis.FromRueidis(newRueidis(b, srv.Addr)))
		return func(i int) error {
			_, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], rate)
			return err
		}
	}
	paired := decider() // the decisions paired with each acquire+release run
	for _, mode := range []string{"gcra/allow", "concurrency/acquire+release"} {
		call := decider()
		if mode != "gcra/allow" {
			lim := sluice.New(redis.FromRueidis(newRueidis(b, srv.Addr)))
			call = func(i int) error {
				key := benchKeyNames[i%benchKeys]
				r, err := lim.Acquire(ctx, key, slot)
				if err != nil {
					return err
				}
				if !r.Allowed {
					return fmt.Errorf("acquire on %s denied: the limit should admit every call", key)
				}
				_, err = r.Release(ctx)
				return err
			}
		}
		b.Run(strconv.Itoa(callers)+"/"+mode, func(b *testing.B) {
			for _, f := range []func(int) error{call, paired} { // load the scripts
				if err := f(0); err != nil {
					b.Fatal(err)
				}
			}
			if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
				b.Fatal(err)
			}
			pair := mode != "gcra/allow"
			var dec redisCost // the paired decisions'
			if pair {
				b.StopTimer()
				dec = measureRedis(b, admin, func() { callParallel(b, b.N/2, callers, paired) })
				b.StartTimer()
			}
			b.ReportAllocs()
			b.SetParallelism(callers / runtime.GOMAXPROCS(0))
			got := measureRedis(b, admin, func() { runParallel(b, call) })
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(got.script/n, "redis-µs/op")
			b.ReportMetric(got.process/n, "redis-cpu-µs/op")
			b.ReportMetric(got.calls/n, "calls/op")
			if pair {
				dec.add(measureRedis(b, admin, func() { callParallel(b, b.N-b.N/2, callers, paired) }))
				if dec.process > 0 && dec.script > 0 { // not so in a run of b.N 1
					b.ReportMetric(got.process/dec.process, "cpu-ratio")
					b.ReportMetric(got.script/dec.script, "script-ratio")
				}
			}
		})
	}
}

// redisCost is what the Redis server spent: script time (the usec of
// EVALSHA and EVAL in INFO commandstats) and script calls, and the
// process's user and system CPU (INFO CPU), in µs.
type redisCost struct{ script, calls, process float64 }

func (c *redisCost) add(d redisCost) {
	c.script += d.script
	c.calls += d.calls
	c.process += d.process
}

// measureRedis returns what the server behind c spent while run ran.
func measureRedis(b *testing.B, c rueidis.Client, run func()) redisCost {
	b.Helper()
	before := redisSpent(b, c)
	run()
	after := redisSpent(b, c)
	return redisCost{after.script - before.script, after.calls - before.calls, after.process - before.process}
}

// redisSpent returns the server's script time and calls since CONFIG
// RESETSTAT and its process CPU since it started (used_cpu_user and
// used_cpu_sys of INFO CPU).
func redisSpent(b *testing.B, c rueidis.Client) redisCost {
	b.Helper()
	var r redisCost
	stats := commandStats(b, c)
	for _, cmd := range []string{"evalsha", "eval"} {
		if u, ok := stats[cmd]["usec"]; ok {
			us, err := strconv.ParseFloat(u, 64)
			if err != nil {
				b.Fatalf("commandstats %s usec %q: %v", cmd, u, err)
			}
			r.script += us
		}
		k, _ := strconv.Atoi(stats[cmd]["calls"])
		r.calls += float64(k)
	}
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			s, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s %q: %v", name, v, err)
			}
			r.process += s * 1e6
		}
	}
	return r
}

// callParallel makes n calls of run from callers goroutines, each on its
// own run of indexes i as runParallel's, outside b's timing; it fails b at
// the first error.
func callParallel(b *testing.B, n, callers int, run func(i int) error) {
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			i := int(next.Add(1)) * 7919
			for done.Add(1) <= int64(n) {
				i++
				if err := run(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// BenchmarkBatchScriptCPU reports the Redis server's CPU per decision of
// batch.lua calls of each size, sent one after another (no contention
// from the client), for fixed_window, gcra and sliding_log, beside take.lua's one
// decision per call (size 1):
//
//	go test -run '^$' -bench BatchScriptCPU -benchtime 200x ./store/redis/
func BenchmarkBatchScriptCPU(b *testing.B) {
	srv := redistest.Start(b)
	c := newRueidis(b, srv.Addr)
	store := redis.FromRueidis(c)
	ctx := context.Background()
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA, sluice.SlidingLog} {
		l := benchLimit(a)
		for _, n := range []int{1, 4, 16, 64, 128, 256} {
			b.Run(string(a)+"/"+strconv.Itoa(n), func(b *testing.B) {
				reqs := make([]sluice.Request, n)
				run := func(i int) error {
					for k := range reqs {
						reqs[k] = sluice.Request{Parts: []sluice.Part{{Key: benchKeyNames[(i*n+k)%benchKeys], Limits: []sluice.Limit{l}, Cost: 1}}}
					}
					if n == 1 {
						_, err := store.Take(ctx, reqs[0])
						return err
					}
					_, _, err := store.TakeBatch(ctx, reqs)
					return err
				}
				sequentialScriptCPU(b, c, run, n, "redis-µs/decision")
			})
		}
	}
}

// BenchmarkWaitReplicas measures an admitted decision (token_bucket) with
// and without WithWaitReplicas(1, ...) against a local primary with one
// replica, from one goroutine (a round trip each, and under WAIT the
// replica's acknowledgment) and from 16 (coalesced: one WAIT per batch):
//
//	go test -run '^$' -bench WaitReplicas -benchmem -count 10 ./store/redis/ | tee wait.txt
//	benchstat -col /wait wait.txt
func BenchmarkWaitReplicas(b *testing.B) {
	primary := redistest.Start(b)
	redistest.StartReplica(b, primary)
	l := benchLimit(sluice.TokenBucket)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		open func(opts ...redis.Option) sluice.Store
	}{
		{"rueidis", func(opts ...redis.Option) sluice.Store {
			return redis.FromRueidis(newRueidis(b, primary.Addr), opts...)
		}},
		{"go-redis", func(opts ...redis.Option) sluice.Store {
			return goredis.New(newGoRedis(b, primary.Addr), opts...)
		}},
	} {
		for _, wait := range []bool{false, true} {
			// Timeouts a loaded machine's hiccups never reach: a decision
			// that waits them out would fail the benchmark.
			var opts []redis.Option
			if wait {
				opts = append(opts, redis.WithWaitReplicas(1, time.Second))
			}
			lim := sluice.New(c.open(opts...), sluice.WithStoreTimeout(2*time.Second))
			name := c.name + "/wait=" + strconv.FormatBool(wait)
			b.Run(name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if r, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l); err != nil || !r.Allowed {
						b.Fatal(r, err)
					}
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(16)
				runParallel(b, func(i int) error {
					_, err := lim.Allow(ctx, benchKeyNames[i%benchKeys], l)
					return err
				})
			})
		}
	}
}

// BenchmarkRefundScriptCPU reports the Redis server's CPU per item of
// script calls of 40 keys, sent one after another: a take of 40 parts
// (take.lua) alone, and followed by the refund of half its cost
// (refund.lua), for fixed_window and gcra; the refund's own is the
// difference:
//
//	go test -run '^$' -bench RefundScriptCPU -benchtime 2000x -count 5 ./store/redis/
func BenchmarkRefundScriptCPU(b *testing.B) {
	srv := redistest.Start(b)
	c := newRueidis(b, srv.Addr)
	store := redis.FromRueidis(c)
	ctx := context.Background()
	const n = 40
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA} {
		l := benchLimit(a)
		for _, mode := range []string{"take", "take+refund"} {
			b.Run(string(a)+"/"+mode, func(b *testing.B) {
				parts := make([]sluice.Part, n)
				half := make([]sluice.Part, n)
				run := func(i int) error {
					for k := range parts {
						key := benchKeyNames[(i*n+k)%benchKeys]
						parts[k] = sluice.Part{Key: key, Limits: []sluice.Limit{l}, Cost: 2}
						half[k] = sluice.Part{Key: key, Limits: parts[k].Limits, Cost: 1}
					}
					t, err := store.TakeAt(ctx, sluice.Request{Parts: parts})
					if err != nil || mode == "take" {
						return err
					}
					_, err = store.Refund(ctx, sluice.Request{Parts: half}, t)
					return err
				}
				sequentialScriptCPU(b, c, run, n, "redis-µs/item")
			})
		}
	}
}

// sequentialScriptCPU runs run(i) once to load its scripts, then for
// b.Loop's iterations one after another, and reports the server's script
// time per each of the n items an iteration sends, as unit.
func sequentialScriptCPU(b *testing.B, c rueidis.Client, run func(i int) error, n int, unit string) {
	b.Helper()
	if err := run(0); err != nil { // load the scripts
		b.Fatal(err)
	}
	if err := c.Do(context.Background(), c.B().ConfigResetstat().Build()).Error(); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		if err := run(i); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(scriptUsec(b, c)/float64(b.N*n), unit)
}
