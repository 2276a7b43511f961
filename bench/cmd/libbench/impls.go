package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredislib "github.com/redis/go-redis/v9"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/bench/internal/peers"
	"github.com/sluice-go/sluice/store/redis"
)

// allowFunc decides one request of cost 1 by key and reports whether it
// was admitted.
type allowFunc = peers.Allow

// rate is a limit every implementation can state: n requests per period,
// with a burst of n where the algorithm has one.
type rate struct {
	n   int
	per time.Duration
}

// The limits of the measurements.
var (
	// admitAll admits everything a run sends over 1000 keys: 1e6 per
	// second per key (sluice's sliding_log: its maximum, 10000 per
	// second, still far above what a run sends one key).
	admitAll = rate{1_000_000, time.Second}
	// keepState is one request's state that lives for minutes, for
	// MEMORY USAGE: 10 per hour.
	keepState = rate{10, time.Hour}
	// abusive is the limit of the abusive-key case: 100 per day, a
	// burst of 100 that no refill adds to within a run.
	abusive = rate{100, 24 * time.Hour}
)

// impl is one implementation over Redis.
type impl struct {
	// name labels its rows, e.g. "sluice gcra" or "redis_rate".
	name string
	// algo is sluice's algorithm, or "" for a peer.
	algo sluice.Algorithm
	// settle marks sluice's reserve+settle path under algo: each call
	// reserves and settles (settleReserve, settleActual) instead of
	// deciding once. Its rows stand beside the plain decision's; it has
	// the settle goals (settle.go) instead of the decision goals.
	settle bool
	// slot marks sluice's concurrency path: each call acquires a slot
	// of slotLimit and releases it (slots.go). Its rows stand beside
	// the decision of slotBase; it has the slot goal instead of the
	// decision goals.
	slot bool
	// open returns a new limiter under r with clients of its own, on
	// keys under prefix ("": the library's default), and what closes it.
	open func(ctx context.Context, addr, prefix string, r rate) (allowFunc, func(), error)
}

// sluiceOpts are the Limiter options of a sluice implementation, and
// whether its call reserves and settles, or acquires and releases a slot
// (of slotLimit, whatever the rate).
type sluiceOpts struct{ denyCache, settle, slot bool }

// openSluice is the one place the harness builds sluice's Redis store:
// the way sluice serve does (store/redis.Open of a redis:// URL), with
// its defaults, so that the figures are what a user gets.
func openSluice(a sluice.Algorithm, o sluiceOpts) func(ctx context.Context, addr, prefix string, r rate) (allowFunc, func(), error) {
	return func(ctx context.Context, addr, prefix string, r rate) (allowFunc, func(), error) {
		var opts []redis.Option
		if prefix != "" {
			opts = append(opts, redis.WithPrefix(prefix))
		}
		store, err := redis.Open("redis://"+addr, opts...)
		if err != nil {
			return nil, nil, err
		}
		var lopts []sluice.Option
		if o.denyCache {
			lopts = append(lopts, sluice.WithDenyCache(0))
		}
		lim := sluice.New(store, lopts...)
		if o.settle {
			return peers.SluiceReserveSettle(lim, sluiceLimit(a, r), settleReserve, settleActual), store.Close, nil
		}
		if o.slot {
			return peers.SluiceAcquireRelease(lim, slotLimit), store.Close, nil
		}
		return peers.Sluice(lim, sluiceLimit(a, r)), store.Close, nil
	}
}

// sluiceLimit is r in sluice's terms (sliding_log: at most MaxLogLimit).
func sluiceLimit(a sluice.Algorithm, r rate) sluice.Limit {
	n := r.n
	if a == sluice.SlidingLog && n > sluice.MaxLogLimit {
		n = sluice.MaxLogLimit
	}
	return sluice.Per(n, r.per).Using(a)
}

func newGoRedis(addr string) *goredislib.Client {
	return goredislib.NewClient(&goredislib.Options{Addr: addr})
}

// openRedisRate is github.com/go-redis/redis_rate (GCRA in Lua over
// go-redis, default pool). It prefixes keys with "rate:" itself.
func openRedisRate(ctx context.Context, addr, prefix string, r rate) (allowFunc, func(), error) {
	c := newGoRedis(addr)
	l := redis_rate.NewLimiter(c)
	limit := redis_rate.Limit{Rate: r.n, Burst: r.n, Period: r.per}
	if prefix != "" {
		prefix += ":"
	}
	return func(ctx context.Context, key string) (bool, error) {
		res, err := l.Allow(ctx, prefix+key, limit)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}, func() { _ = c.Close() }, nil
}

// openUlule is github.com/ulule/limiter's Redis store (a fixed window:
// INCRBY and PEXPIRE in Lua over go-redis).
func openUlule(ctx context.Context, addr, prefix string, r rate) (allowFunc, func(), error) {
	c := newGoRedis(addr)
	if prefix == "" {
		prefix = limiter.DefaultPrefix
	}
	store, err := ululeredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: prefix})
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("ulule/limiter: %w", err)
	}
	return peers.Ulule(store, r.n, r.per), func() { _ = c.Close() }, nil
}

// openThrottled is github.com/throttled/throttled's GCRA over its go-redis
// v9 store: a pipelined TIME and GET, then a compare-and-swap script sent
// with EVAL (a first request: SETNX and EXPIRE).
func openThrottled(ctx context.Context, addr, prefix string, r rate) (allowFunc, func(), error) {
	c := newGoRedis(addr)
	if prefix == "" {
		prefix = "throttled"
	}
	store, err := throttledredis.NewCtx(c, prefix+":")
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("throttled: %w", err)
	}
	allow, err := peers.Throttled(store, r.n, r.per)
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("throttled: %w", err)
	}
	return allow, func() { _ = c.Close() }, nil
}

// redisImpls are the implementations over Redis, side by side: sluice's
// five algorithms, each of settleAlgorithms followed by its reserve+settle
// (next to it in every round), slotBase's also by the acquire+release of
// a concurrency slot, then the peers.
func redisImpls() []impl {
	var is []impl
	for _, a := range sluice.Algorithms {
		is = append(is, impl{name: "sluice " + string(a), algo: a, open: openSluice(a, sluiceOpts{})})
		if slices.Contains(settleAlgorithms, a) {
			is = append(is, impl{name: settleName(a), algo: a, settle: true, open: openSluice(a, sluiceOpts{settle: true})})
		}
		if a == slotBase {
			is = append(is, impl{name: slotName, algo: sluice.Concurrency, slot: true, open: openSluice(sluice.Concurrency, sluiceOpts{slot: true})})
		}
	}
	return append(is,
		impl{name: "redis_rate", open: openRedisRate},
		impl{name: "ulule/limiter", open: openUlule},
		impl{name: "throttled", open: openThrottled},
	)
}

// abusiveImpls are the implementations of the abusive-key case.
func abusiveImpls() []impl {
	return []impl{
		{name: "sluice gcra + deny cache", algo: sluice.GCRA, open: openSluice(sluice.GCRA, sluiceOpts{denyCache: true})},
		{name: "sluice gcra", algo: sluice.GCRA, open: openSluice(sluice.GCRA, sluiceOpts{})},
		{name: "redis_rate", open: openRedisRate},
	}
}
