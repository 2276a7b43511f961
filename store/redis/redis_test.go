//go:build integration

package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/redis/goredis"
	"github.com/sluice-go/sluice/store/storetest"
)

// newRueidis connects a rueidis client to the server at addrs (or the
// Cluster they are seed nodes of) as Open does, closed when t ends.
func newRueidis(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	return rueidisWith(t, rueidis.ClientOption{InitAddress: addrs})
}

// rueidisWith connects a rueidis client with opt as Open does
// (redis.NewClient: no client-side cache, Sentinel refresh), closed
// when t ends.
func rueidisWith(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := redis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newGoRedis connects a go-redis client to addr, closed when t ends.
func newGoRedis(t testing.TB, addr string) *goredislib.Client {
	t.Helper()
	c := goredislib.NewClient(&goredislib.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// replicaStores returns n stores, each over a client of its own, as n
// replicas would have: rueidis (from newR) for even i, go-redis (from newG)
// for odd i.
func replicaStores[G goredislib.Scripter](n int, newR func() rueidis.Client, newG func() G, opts ...redis.Option) []*redis.Store {
	stores := make([]*redis.Store, n)
	for i := range stores {
		if i%2 == 0 {
			stores[i] = redis.FromRueidis(newR(), opts...)
		} else {
			stores[i] = goredis.New(newG(), opts...)
		}
	}
	return stores
}

// limitersOver returns one Limiter per store, each with opts(i).
func limitersOver(stores []*redis.Store, opts func(i int) []sluice.Option) []*sluice.Limiter {
	lims := make([]*sluice.Limiter, len(stores))
	for i, s := range stores {
		lims[i] = sluice.New(s, opts(i)...)
	}
	return lims
}

// same returns opts for every replica, for limitersOver.
func same(opts ...sluice.Option) func(int) []sluice.Option {
	return func(int) []sluice.Option { return opts }
}

// prefixes gives every store of a test run its own key space on one server.
var prefixes atomic.Int64

func prefix() redis.Option {
	return redis.WithPrefix(fmt.Sprintf("t%d", prefixes.Add(1)))
}

func TestConformanceRueidis(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	storetest.Run(t, func(t *testing.T, _ func() time.Time) sluice.Store {
		return redis.FromRueidis(c, prefix())
	})
}

func TestConformanceGoRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := newGoRedis(t, srv.Addr)
	storetest.Run(t, func(t *testing.T, _ func() time.Time) sluice.Store {
		return goredis.New(c, prefix())
	})
}

func TestConformanceOpen(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redis.Open("redis://"+srv.Addr+"/0", prefix())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := sluice.New(s).Allow(context.Background(), "k", sluice.PerMinute(1))
	if err != nil || !r.Allowed {
		t.Fatalf("Allow through Open = %+v, %v", r, err)
	}
}
