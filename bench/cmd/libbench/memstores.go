package main

import (
	"time"

	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	xrate "golang.org/x/time/rate"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/bench/internal/peers"
	"github.com/sluice-go/sluice/store/memory"
)

// memStore is an in-process store. bench is the name of its rows in the
// go test benchmarks of peers_test.go (BenchmarkMemory, MemoryOneKey,
// Memory1M).
type memStore struct {
	name, bench string
	// open returns a new store's decisions under r, which hold the store
	// (kept alive while its heap is measured); nil for a row with no heap
	// measure.
	open func(r rate) (allowFunc, error)
}

// memoryStores are the in-process stores, sluice's five algorithms first.
func memoryStores() []memStore {
	var ms []memStore
	for _, a := range sluice.Algorithms {
		ms = append(ms, memStore{name: "sluice " + string(a), bench: "sluice-" + string(a), open: func(r rate) (allowFunc, error) {
			return peers.Sluice(sluice.New(memory.New()), sluiceLimit(a, r)), nil
		}})
	}
	return append(ms,
		memStore{name: "x/time/rate, one *rate.Limiter", bench: "x-time-rate"},
		memStore{name: "x/time/rate sync.Map", bench: "x-time-rate-syncmap", open: func(r rate) (allowFunc, error) {
			every := xrate.Every(r.per / time.Duration(r.n))
			return peers.SyncMapRate(func() *xrate.Limiter { return xrate.NewLimiter(every, r.n) }), nil
		}},
		memStore{name: "ulule/limiter memory", bench: "ulule-memory", open: func(r rate) (allowFunc, error) {
			return peers.Ulule(ululememory.NewStore(), r.n, r.per), nil
		}},
		memStore{name: "throttled memstore", bench: "throttled-memstore", open: func(r rate) (allowFunc, error) {
			return peers.ThrottledMemory(r.n, r.per)
		}},
	)
}
