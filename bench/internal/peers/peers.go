// Package peers is what the go test benchmarks (bench/peers_test.go) and
// cmd/libbench share: the client keys they cycle through, and the way each
// builds a decision of sluice and of the peer libraries, so that a row of
// the micro-benchmarks and the libbench row of the same name measure the
// same thing.
package peers

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	"github.com/ulule/limiter/v3"
	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice"
)

// KeySpace is how many client keys the 1000-key runs cycle through.
const KeySpace = 1000

// Keys are the client keys of the 1000-key runs: ClientKeys(KeySpace).
var Keys = ClientKeys(KeySpace)

// ClientKeys returns n client keys, "client-0" to "client-<n-1>".
func ClientKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "client-" + strconv.Itoa(i)
	}
	return ks
}

// Allow decides one request of cost 1 by key and reports whether it was
// admitted.
type Allow func(ctx context.Context, key string) (bool, error)

// Sluice decides with l under limit.
func Sluice(l *sluice.Limiter, limit sluice.Limit) Allow {
	return func(ctx context.Context, key string) (bool, error) {
		r, err := l.Allow(ctx, key, limit)
		return r.Allowed, err
	}
}

// SluiceReserveSettle reserves max by key under limit with l
// (Limiter.Reserve) and settles the reservation at actual
// (Reservation.Settle): one call of sluice's reserve-and-settle path,
// admitted when the reservation was. A denied reservation is not settled.
func SluiceReserveSettle(l *sluice.Limiter, limit sluice.Limit, max, actual int) Allow {
	return func(ctx context.Context, key string) (bool, error) {
		r, err := l.Reserve(ctx, key, limit, max)
		if err != nil || !r.Allowed {
			return false, err
		}
		if _, err := r.Settle(ctx, actual); err != nil {
			return false, err
		}
		return true, nil
	}
}

// SluiceAcquireRelease acquires a slot of limit, a Concurrency limit, by
// key with l (Limiter.Acquire) and releases it (Reservation.Release): one
// call of sluice's concurrency path, admitted when the acquire was. A
// denied acquire holds nothing to release.
func SluiceAcquireRelease(l *sluice.Limiter, limit sluice.Limit) Allow {
	return func(ctx context.Context, key string) (bool, error) {
		r, err := l.Acquire(ctx, key, limit)
		if err != nil || !r.Allowed {
			return false, err
		}
		if _, err := r.Release(ctx); err != nil {
			return false, err
		}
		return true, nil
	}
}

// Ulule decides with github.com/ulule/limiter over store: a fixed window
// of n per period.
func Ulule(store limiter.Store, n int, period time.Duration) Allow {
	l := limiter.New(store, limiter.Rate{Limit: int64(n), Period: period})
	return func(ctx context.Context, key string) (bool, error) {
		r, err := l.Get(ctx, key)
		return err == nil && !r.Reached, err
	}
}

// ThrottledCASAttempts is how often throttled retries its compare and swap
// before it fails a decision (its default, 10, fails decisions of a key
// that parallel callers contend for).
const ThrottledCASAttempts = 1000

// Throttled decides with github.com/throttled/throttled's GCRA over store:
// n per period, a burst of n, ThrottledCASAttempts attempts.
func Throttled(store throttled.GCRAStoreCtx, n int, period time.Duration) (Allow, error) {
	l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: throttled.PerDuration(n, period), MaxBurst: n - 1})
	if err != nil {
		return nil, err
	}
	l.SetMaxCASAttemptsLimit(ThrottledCASAttempts)
	return func(ctx context.Context, key string) (bool, error) {
		limited, _, err := l.RateLimitCtx(ctx, key, 1)
		return err == nil && !limited, err
	}, nil
}

// ThrottledMemory is Throttled over throttled's in-memory store (no key
// bound).
func ThrottledMemory(n int, period time.Duration) (Allow, error) {
	st, err := memstore.NewCtx(0)
	if err != nil {
		return nil, err
	}
	return Throttled(st, n, period)
}

// SyncMapRate decides with one *rate.Limiter of golang.org/x/time/rate per
// key, made by newLimiter and held in a sync.Map the way an application
// would, never evicted.
func SyncMapRate(newLimiter func() *rate.Limiter) Allow {
	var m sync.Map // string → *rate.Limiter
	return func(_ context.Context, key string) (bool, error) {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, newLimiter())
		}
		return v.(*rate.Limiter).Allow(), nil
	}
}
