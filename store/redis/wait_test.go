//go:build integration

package redis_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/redis/goredis"
)

// waitTimeout is the WAIT timeout of the tests: short, since a stopped
// replica makes every admitted decision wait it out.
const waitTimeout = 50 * time.Millisecond

// pause stops srv (SIGSTOP) until the returned function or the end of t
// lets it go on (SIGCONT): a replica that holds its connection open and
// acknowledges nothing, the state a replica is in during a stall.
func pause(t *testing.T, srv *redistest.Server) (resume func()) {
	t.Helper()
	if err := syscall.Kill(srv.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(srv.Pid(), syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	return resume
}

// oneLimit is a request of cost under one limit l for key.
func oneLimit(key string, l sluice.Limit, cost int) sluice.Request {
	return sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: cost}}}
}

// TestWaitReplicas: with WithWaitReplicas(1, ...), an admitted decision is
// on the replica when it is answered; while the replica acknowledges
// nothing (stopped), an admitted decision fails with ErrNotReplicated,
// while denials, cost-0 decisions and peeks are answered; the same store
// without WAIT admits (the control: its write is acknowledged and not
// replicated), over both clients, alone and in a coalesced batch.
func TestWaitReplicas(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	onReplica := newRueidis(t, replica.Addr)
	clients := []struct {
		name string
		open func(opts ...redis.Option) *redis.Store
	}{
		{"rueidis", func(opts ...redis.Option) *redis.Store {
			return redis.FromRueidis(newRueidis(t, primary.Addr), opts...)
		}},
		{"go-redis", func(opts ...redis.Option) *redis.Store {
			return goredis.New(newGoRedis(t, primary.Addr), opts...)
		}},
	}
	l := sluice.Per(2, sluice.MaxPeriod).Using(sluice.FixedWindow)
	ctx := context.Background()
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			pfx := prefix()
			// waiting, which the replicating checks use, has time enough
			// for a loaded machine; short fails fast where the replica is
			// stopped.
			waiting := c.open(pfx, redis.WithWaitReplicas(1, 10*time.Second))
			short := c.open(pfx, redis.WithWaitReplicas(1, waitTimeout))
			plain := c.open(pfx)
			onReplicaHas := func(key string) bool {
				t.Helper()
				n, err := onReplica.Do(ctx, onReplica.B().Exists().Key(waiting.Key(key, l)).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				return n == 1
			}
			take := func(s *redis.Store, key string, cost int) (sluice.Result, error) {
				t.Helper()
				rs, err := s.Take(ctx, oneLimit(key, l, cost))
				if err != nil {
					return sluice.Result{}, err
				}
				return rs[0], nil
			}
			// Replicating: each admitted decision is on the replica when
			// it is answered.
			for _, key := range []string{"a", "b", "c"} {
				if r, err := take(waiting, key, 1); err != nil || !r.Allowed || r.Remaining != 1 {
					t.Fatalf("take %s = %+v, %v; want admitted, 1 remaining", key, r, err)
				}
				if !onReplicaHas(key) {
					t.Fatalf("take %s was answered before the replica had it", key)
				}
			}
			if r, err := take(waiting, "full", 2); err != nil || !r.Allowed {
				t.Fatalf("take full = %+v, %v; want admitted", r, err)
			}

			resume := pause(t, replica)
			r, err := take(short, "a", 1)
			if !errors.Is(err, redis.ErrNotReplicated) {
				t.Errorf("take a, replica stopped = %+v, %v; want an error wrapping ErrNotReplicated", r, err)
			}
			if r, err := take(short, "full", 1); err != nil || r.Allowed {
				t.Errorf("take full, replica stopped = %+v, %v; want denied, no error: a denial wrote nothing", r, err)
			}
			if r, err := take(short, "b", 0); err != nil || !r.Allowed || r.Remaining != 1 {
				t.Errorf("take b at cost 0, replica stopped = %+v, %v; want admitted, 1 remaining, no error", r, err)
			}
			if rs, err := short.Peek(ctx, oneLimit("b", l, 1)); err != nil || !rs[0].Allowed {
				t.Errorf("peek b, replica stopped = %+v, %v; want admitted, no error", rs, err)
			}
			// The control: without WAIT the primary acknowledges what the
			// replica does not have.
			if r, err := take(plain, "b", 1); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Errorf("take b without WAIT, replica stopped = %+v, %v; want admitted, 0 remaining", r, err)
			}

			// A coalesced batch: one WAIT for all; each decision gets its
			// own answer.
			batch := []sluice.Request{oneLimit("c", l, 1), oneLimit("full", l, 1), oneLimit("d", l, 0), oneLimit("e", l, 1)}
			rs, errs := short.SendBatch(ctx, batch)
			for i, want := range []struct {
				notReplicated, allowed bool
			}{{true, false}, {false, false}, {false, true}, {true, false}} {
				switch {
				case want.notReplicated && !errors.Is(errs[i], redis.ErrNotReplicated):
					t.Errorf("batch decision %d, replica stopped = %v, %v; want an error wrapping ErrNotReplicated", i, rs[i], errs[i])
				case !want.notReplicated && (errs[i] != nil || rs[i][0].Allowed != want.allowed):
					t.Errorf("batch decision %d, replica stopped = %v, %v; want allowed %v, no error", i, rs[i], errs[i], want.allowed)
				}
			}
			if err := short.Ready(ctx); !errors.Is(err, redis.ErrNotReplicated) {
				t.Errorf("Ready, replica stopped = %v; want an error wrapping ErrNotReplicated", err)
			}

			resume()
			// c and e were consumed on the primary although they failed.
			rs, errs = waiting.SendBatch(ctx, []sluice.Request{oneLimit("e", l, 1), oneLimit("f", l, 1), oneLimit("full", l, 1)})
			for i, rem := range []int{0, 1, -1} {
				if errs[i] != nil || (rem >= 0) != rs[i][0].Allowed || (rem >= 0 && rs[i][0].Remaining != rem) {
					t.Errorf("batch decision %d, replicating = %v, %v; want remaining %d (-1: denied), no error", i, rs[i], errs[i], rem)
				}
			}
			if !onReplicaHas("f") {
				t.Error("the batch was answered before the replica had f")
			}
			if err := waiting.Ready(ctx); err != nil {
				t.Errorf("Ready, replicating = %v", err)
			}
		})
	}
}

// TestWaitReplicasRefused: WithWaitReplicas panics on what cannot be
// honored (TestCluster/WaitRefused: Open refuses it on a Cluster).
func TestWaitReplicasRefused(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	mustPanic("WithWaitReplicas(0, 50ms)", func() { redis.WithWaitReplicas(0, waitTimeout) })
	mustPanic("WithWaitReplicas(1, 0)", func() { redis.WithWaitReplicas(1, 0) })
	cluster := goredislib.NewClusterClient(&goredislib.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	mustPanic("goredis.New(ClusterClient, WithWaitReplicas)", func() { goredis.New(cluster, redis.WithWaitReplicas(1, waitTimeout)) })
	ring := goredislib.NewRing(&goredislib.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	mustPanic("goredis.New(Ring, WithWaitReplicas)", func() { goredis.New(ring, redis.WithWaitReplicas(1, waitTimeout)) })
	// The control: the same clients without it, and a plain client with it.
	goredis.New(cluster)
	goredis.New(ring)
	plain := goredislib.NewClient(&goredislib.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = plain.Close() })
	goredis.New(plain, redis.WithWaitReplicas(1, waitTimeout))

}

// clusterWaitRefused: Open refuses WithWaitReplicas on a Cluster, and
// opens it without.
func clusterWaitRefused(t *testing.T, c *redistest.Cluster) {
	_, err := redis.Open(clusterURL(c), redis.WithWaitReplicas(1, waitTimeout))
	if !errors.Is(err, redis.ErrWaitUnsupported) {
		t.Errorf("Open(cluster, WithWaitReplicas) = %v; want an error wrapping ErrWaitUnsupported", err)
	}
	s, err := redis.Open(clusterURL(c))
	if err != nil {
		t.Fatalf("Open(cluster) = %v", err)
	}
	s.Close()
}
