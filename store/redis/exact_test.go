//go:build integration

package redis_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/storetest"
)

const (
	replicas   = 8  // independent clients, each with its own connections
	goroutines = 32 // per client
	attempts   = 8  // per goroutine: 2048 requests for a limit of 500
)

// serverStores returns n stores over the server at addr, each over a
// client of its own, closed when t ends: rueidis for even i, go-redis for
// odd i.
func serverStores(t testing.TB, addr string, n int, opts ...redis.Option) []*redis.Store {
	return replicaStores(n,
		func() rueidis.Client { return newRueidis(t, addr) },
		func() *goredislib.Client { return newGoRedis(t, addr) }, opts...)
}

// TestExactUnderConcurrency runs exactSuite on 8 replicas of one server.
func TestExactUnderConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	exactSuite(t, serverStores(t, srv.Addr, replicas))
}

// exactSuite: replicas (one per store, 32 goroutines each) hammering one
// key with 500 per day admit exactly 500 for every algorithm, with a
// frozen clock and with the Redis server's clock; and two limits
// checked together admit exactly the tighter one, denied requests
// consuming nothing from the looser one.
func exactSuite(t *testing.T, stores []*redis.Store) {
	frozen := storetest.NewClock()
	frozenLims := limitersOver(stores, same(sluice.WithClock(frozen.Now)))
	serverLims := limitersOver(stores, same())
	for _, a := range sluice.Algorithms {
		// A day's period: no refill or window boundary falls inside the
		// test on the server's clock, and on the frozen one no key expires.
		// Redis expires keys on its own clock, so at 500 a minute a frozen
		// clock's first gcra or token_bucket admit would live 120 ms of
		// real time, which a slow run outlasts, admitting a 501st.
		t.Run(string(a)+"/frozen clock", func(t *testing.T) {
			l := sluice.PerDay(500).Using(a)
			got := storetest.Hammer(t, frozenLims, "hot-frozen-"+string(a), goroutines, attempts, l)
			t.Logf("%s: %d replicas × %d goroutines × %d requests admitted %d", l, len(stores), goroutines, attempts, got)
			if got != 500 {
				t.Errorf("%s admitted %d, want exactly 500", l, got)
			}
		})
		t.Run(string(a)+"/server clock", func(t *testing.T) {
			l := sluice.PerDay(500).Using(a)
			if got := storetest.Hammer(t, serverLims, "hot-server-"+string(a), goroutines, attempts, l); got != 500 {
				t.Errorf("%s admitted %d, want exactly 500", l, got)
			}
		})
	}
	t.Run("multi", func(t *testing.T) {
		storetest.HammerMulti(t, frozenLims, goroutines, attempts)
	})
}

// racyStore is the classic broken distributed limiter: GET the state,
// decide in the client (by internal/algo, the decision every store
// makes), SET the new state back. Two replicas that read the same state
// both write what they decided from it, and one admit is lost. It exists
// only to prove that the harnesses catch the race: the count of admits
// (TestHarnessCatchesRace) and the linearizability checker
// (TestLinearizableCatchesRace). It decides one part of one limit.
//
// lost counts the writes that replaced another state than the one their
// decision read (SET ... GET answers the value it replaced): a write
// that came between that decision's GET and SET, which an atomic store
// never lets happen. When none was lost, each decision took effect at
// once, at its SET (or at its GET, when it wrote nothing).
type racyStore struct {
	c    rueidis.Client
	lost *atomic.Int64
}

func newRacyStore(c rueidis.Client) racyStore { return racyStore{c: c, lost: new(atomic.Int64)} }

func (r racyStore) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	if len(req.Parts) != 1 || len(req.Parts[0].Limits) != 1 {
		return nil, errors.New("racyStore decides one part of one limit")
	}
	p, l := req.Parts[0], req.Parts[0].Limits[0]
	key := racyKey(p, l)
	st, raw, err := r.read(ctx, key)
	if err != nil {
		return nil, err
	}
	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	res, next, ttl := algo.Check(l, st, now.UnixMicro(), int64(p.Cost))
	if !res.Allowed {
		return []sluice.Result{res}, nil
	}
	if err := r.write(ctx, key, raw, next, ttl); err != nil {
		return nil, err
	}
	return []sluice.Result{res}, nil
}

// racyKey is the key racyStore keeps p's state under l at.
func racyKey(p sluice.Part, l sluice.Limit) string {
	return "racy:" + p.Key + ":" + string(l.Algorithm)
}

// read GETs the state at key, and the raw value for write.
func (r racyStore) read(ctx context.Context, key string) (algo.State, string, error) {
	var st algo.State
	raw, err := r.c.Do(ctx, r.c.B().Get().Key(key).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return st, "", err
	}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return st, "", err
		}
	}
	return st, raw, nil
}

// write SETs next at key for ttl µs (ttl <= 0: deletes it), counting a
// write that replaced another value than raw, the one read.
func (r racyStore) write(ctx context.Context, key, raw string, next algo.State, ttl int64) error {
	var cmd rueidis.Completed
	if ttl <= 0 {
		cmd = r.c.B().Getdel().Key(key).Build()
	} else {
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		cmd = r.c.B().Set().Key(key).Value(string(b)).Get().PxMilliseconds((ttl + 999) / 1000).Build()
	}
	old, err := r.c.Do(ctx, cmd).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	if old != raw {
		r.lost.Add(1)
	}
	return nil
}

func (r racyStore) Reset(context.Context, string, ...sluice.Limit) error { return nil }

// Renew and Peek: the racy limiter holds no slots and has no read.
func (racyStore) Renew(context.Context, sluice.Request) ([]sluice.Result, error) {
	return nil, errors.ErrUnsupported
}

func (racyStore) Peek(context.Context, sluice.Request) ([]sluice.Result, error) {
	return nil, errors.ErrUnsupported
}

// TestHarnessCatchesRace: the same harness, on the GET-then-SET limiter,
// admits more than the limit (at a frozen clock: no window ends).
func TestHarnessCatchesRace(t *testing.T) {
	srv := redistest.Start(t)
	frozen := storetest.NewClock()
	var lims []*sluice.Limiter
	for range replicas {
		lims = append(lims, sluice.New(newRacyStore(newRueidis(t, srv.Addr)), sluice.WithClock(frozen.Now)))
	}
	l := sluice.PerDay(500).Using(sluice.FixedWindow)
	got := storetest.Hammer(t, lims, "hot", goroutines, attempts, l)
	t.Logf("GET-then-SET limiter: %d replicas × %d goroutines admitted %d for a limit of 500", replicas, goroutines, got)
	if got <= 500 {
		t.Errorf("the racy limiter admitted %d; the harness should have caught lost increments (more than 500)", got)
	}
}
