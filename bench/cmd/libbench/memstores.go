package main

import (
	"context"
	"sync"
	"time"

	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	"github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	xrate "golang.org/x/time/rate"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// memStore is an in-process store. bench is the name of its rows in the
// go test benchmarks of peers_test.go (BenchmarkMemory, MemoryOneKey,
// Memory1M).
type memStore struct {
	name, bench string
	// open returns a new store's decisions under r and a value that
	// holds the store (kept alive while its heap is measured); nil for a
	// row with no heap measure.
	open func(r rate) (allowFunc, any, error)
}

// memoryStores are the in-process stores, sluice's five algorithms first.
func memoryStores() []memStore {
	var ms []memStore
	for _, a := range sluice.Algorithms {
		ms = append(ms, memStore{name: "sluice " + string(a), bench: "sluice-" + string(a), open: func(r rate) (allowFunc, any, error) {
			lim := sluice.New(memory.New())
			l := sluiceLimit(a, r)
			return func(ctx context.Context, key string) (bool, error) {
				res, err := lim.Allow(ctx, key, l)
				return res.Allowed, err
			}, lim, nil
		}})
	}
	return append(ms,
		memStore{name: "x/time/rate, one *rate.Limiter", bench: "x-time-rate"},
		memStore{name: "x/time/rate sync.Map", bench: "x-time-rate-syncmap", open: func(r rate) (allowFunc, any, error) {
			m := new(sync.Map)
			every := xrate.Every(r.per / time.Duration(r.n))
			return func(_ context.Context, key string) (bool, error) {
				v, ok := m.Load(key)
				if !ok {
					v, _ = m.LoadOrStore(key, xrate.NewLimiter(every, r.n))
				}
				return v.(*xrate.Limiter).Allow(), nil
			}, m, nil
		}},
		memStore{name: "ulule/limiter memory", bench: "ulule-memory", open: func(r rate) (allowFunc, any, error) {
			l := limiter.New(ululememory.NewStore(), limiter.Rate{Limit: int64(r.n), Period: r.per})
			return func(ctx context.Context, key string) (bool, error) {
				res, err := l.Get(ctx, key)
				return err == nil && !res.Reached, err
			}, l, nil
		}},
		memStore{name: "throttled memstore", bench: "throttled-memstore", open: func(r rate) (allowFunc, any, error) {
			st, err := memstore.NewCtx(0)
			if err != nil {
				return nil, nil, err
			}
			l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerDuration(r.n, r.per), MaxBurst: r.n - 1})
			if err != nil {
				return nil, nil, err
			}
			return func(ctx context.Context, key string) (bool, error) {
				limited, _, err := l.RateLimitCtx(ctx, key, 1)
				return err == nil && !limited, err
			}, l, nil
		}},
	)
}
