//go:build integration

package redis_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/linear"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/internal/testing/toxitest"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/storetest"
)

// The linearizability runs (package internal/testing/linear): 24 clients over
// several replicas, 12 rounds of 4 decisions each, on the keys of every
// algorithm and a multi-limit key, each decision at an instant of the
// key's fake clock; porcupine then finds, key by key, one order of the
// decisions that explains every answer, or fails the test and writes its
// visualization (linear.ArtifactDir).
const (
	linearClients = 24
	linearRounds  = 12
	linearPer     = 4
)

// linearRun returns the run over stores (the replicas; clients shared out
// among them) on keys named after prefix.
func linearRun(stores []*redis.Store, prefix string) linear.Run {
	ss := make([]sluice.Store, len(stores))
	for i, s := range stores {
		ss[i] = s
	}
	return linear.Run{Stores: ss, Clients: linearClients / len(ss), Rounds: linearRounds, PerRound: linearPer,
		Keys: linear.Keys(prefix), Tick: linear.Tick, Seed: 1}
}

// coalesced logs and returns how many batch calls of two decisions or
// more stores sent.
func coalesced(t *testing.T, stores []*redis.Store) int64 {
	t.Helper()
	var batches, decisions, largest int64
	for _, s := range stores {
		b, d, l := s.Coalesced()
		batches, decisions, largest = batches+b, decisions+d, max(largest, l)
	}
	t.Logf("coalescing: %d batch calls carried %d decisions (at most %d)", batches, decisions, largest)
	return batches
}

// TestLinearizable: on one redis-server, 4 replicas (rueidis and
// go-redis, each its own connection pool) with coalescing off, and 2
// replicas of 12 clients each with coalescing on (decisions queue behind
// the 4 calls in flight of each and go in batches), decide linearizably;
// so do 2 replicas at the server's clock (TIME in the scripts, one for a
// whole batch), over limits that time does not matter to.
func TestLinearizable(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("coalescing off", func(t *testing.T) {
		stores := serverStores(t, srv.Addr, 4, prefix(), redis.WithBatch(1))
		linear.Require(t, linearRun(stores, "off-").Record(t))
	})
	t.Run("coalescing", func(t *testing.T) {
		stores := serverStores(t, srv.Addr, 2, prefix())
		linear.Require(t, linearRun(stores, "batch-").Record(t))
		if coalesced(t, stores) == 0 {
			t.Errorf("no decisions were coalesced: the run did not exercise batch.lua")
		}
	})
	t.Run("server clock", func(t *testing.T) {
		stores := serverStores(t, srv.Addr, 2, prefix())
		r := linearRun(stores, "server-")
		r.Keys, r.ServerClock = linear.ServerKeys("server-"), true
		linear.Require(t, r.Record(t))
		if coalesced(t, stores) == 0 {
			t.Errorf("no decisions were coalesced: the run did not exercise batch.lua")
		}
	})
}

// clusterLinearizable: the runs of TestLinearizable on a three-master
// Cluster, coalescing on, at the fake clock and at the servers' clocks: every decision of a key goes to its slot's
// master, in its slot's lane (one lane per slot: fewer decisions queue
// than on one server, and fewer are coalesced).
func clusterLinearizable(t *testing.T, c *redistest.Cluster) {
	stores := clusterStores(t, c, 2, prefix())
	linear.Require(t, linearRun(stores, "cluster-").Record(t))
	r := linearRun(stores, "cluster-server-")
	r.Keys, r.ServerClock = linear.ServerKeys("cluster-server-"), true
	linear.Require(t, r.Record(t))
	coalesced(t, stores)
}

// TestLinearizableToxic: between 4 replicas and the server, a toxiproxy
// that delays every reply by 4 ms ± 3 ms and every request by 1 ms ± 1 ms
// (each connection on its own draws: replies of one replica overtake
// another's), decisions stay linearizable, coalescing on.
func TestLinearizableToxic(t *testing.T) {
	tp := toxitest.Start(t)
	srv := redistest.Start(t)
	p := tp.Proxy(t, "redis", srv.Addr)
	p.Add(t, toxitest.Toxic{Type: "latency", Stream: "downstream", Attributes: map[string]any{"latency": 4, "jitter": 3}})
	p.Add(t, toxitest.Toxic{Type: "latency", Stream: "upstream", Attributes: map[string]any{"latency": 1, "jitter": 1}})
	stores := serverStores(t, p.Addr, 4, prefix())
	linear.Require(t, linearRun(stores, "toxic-").Record(t))
	coalesced(t, stores)
}

// raceAttempts bounds the control's runs: each is a fresh run that may
// or may not interleave two GET-then-SET decisions, which the scheduler
// decides; the first run with a lost write ends the control.
const raceAttempts = 20

// TestLinearizableCatchesRace is the checker's control: the GET-then-SET
// limiter (racyStore: the same algorithms, decided in the client). Alone,
// one client on the keys of every algorithm, it loses no write and is
// linearizable: it answers as the model does. With 32 clients on one key,
// a run that lost a write (SET ... GET answered another state than the
// decision read) must be Illegal, with its visualization written, and a
// run that lost none must be Ok (its decisions then took effect one at a
// time, each at its SET); within raceAttempts runs at least one must
// lose a write. The retries wait for the race, which the scheduler
// decides, not for the checker: each run is judged by whether it raced,
// which the store knows without porcupine.
func TestLinearizableCatchesRace(t *testing.T) {
	srv := redistest.Start(t)
	var stores []sluice.Store
	var racy []racyStore
	for range 4 {
		r := newRacyStore(newRueidis(t, srv.Addr))
		stores, racy = append(stores, r), append(racy, r)
	}
	lost := func() (n int64) {
		for _, s := range racy {
			n += s.lost.Swap(0)
		}
		return n
	}
	t.Run("alone", func(t *testing.T) {
		var keys []linear.Key
		for _, k := range linear.Keys("racy-alone-") {
			if len(k.Limits) == 1 { // racyStore decides one limit
				keys = append(keys, k)
			}
		}
		r := linear.Run{Stores: stores[:1], Clients: 1, Rounds: 6, PerRound: 60, Keys: keys, Tick: linear.Tick, Seed: 1}
		linear.Require(t, r.Record(t))
		if n := lost(); n != 0 {
			t.Errorf("one client lost %d writes", n)
		}
	})
	r := linear.Run{Stores: stores, Clients: 8, Rounds: 4, PerRound: 8, Tick: linear.Tick,
		Keys: []linear.Key{{Name: "racy", Limits: []sluice.Limit{sluice.Per(1000, 3*linear.Tick).Using(sluice.FixedWindow)}}}}
	requireCaught(t, r, "writes lost", lost)
}

// requireCaught runs r, on a fresh key and seed each time, until a run
// went wrong by the store's own account (wrong(), which also resets the
// account, is above 0), at most raceAttempts times. porcupine must find
// every run before it Ok and that one Illegal, with its visualization
// written; if no run went wrong, the control never raced and t fails.
func requireCaught(t *testing.T, r linear.Run, what string, wrong func() int64) {
	t.Helper()
	name := r.Keys[0].Name
	for attempt := range raceAttempts {
		r.Keys[0].Name, r.Seed = fmt.Sprintf("%s-%d", name, attempt), uint64(attempt)
		h := r.Record(t)
		n := wrong()
		v := linear.Check(t.Name(), h)[0]
		t.Logf("attempt %d: %d decisions, %d overlapping, %d %s: porcupine says %s in %v", attempt, v.Ops, v.Overlapping, n, what, v.Result, v.Took)
		switch {
		case v.Result == porcupine.Unknown:
			t.Fatal(v.Err())
		case n == 0 && v.Result != porcupine.Ok:
			t.Fatalf("no %s, yet %v", what, v.Err())
		case n == 0:
			continue
		case v.Result != porcupine.Illegal:
			t.Fatalf("%d %s, yet porcupine finds the history linearizable", n, what)
		}
		if fi, err := os.Stat(v.View); err != nil || fi.Size() == 0 || v.ViewErr != nil {
			t.Fatalf("visualization %s: %v, %v; want a non-empty file", v.View, err, v.ViewErr)
		}
		t.Logf("the checker caught it; its visualization: %s", v.View)
		return
	}
	t.Fatalf("no %s in %d runs: the control never raced", what, raceAttempts)
}

// staleStore decides through the Redis store, atomically, but answers
// with the Remaining it read before (a Peek, then the Take) less the
// cost: what the Take answers when nothing comes between them. Its
// admits are exact, so a count of them passes it; its answers are not
// those of any order once another decision comes between its read and
// its take. stale counts those answers (the Take's own Remaining was
// another).
type staleStore struct {
	*redis.Store
	stale *atomic.Int64
}

func (s staleStore) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	before, err := s.Store.Peek(ctx, req)
	if err != nil {
		return nil, err
	}
	rs, err := s.Store.Take(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range rs {
		if rem := before[i].Remaining - req.Parts[0].Cost; rs[i].Allowed && rs[i].Remaining != rem {
			rs[i].Remaining = rem
			s.stale.Add(1)
		}
	}
	return rs, nil
}

// TestLinearizableCatchesStaleAnswer: "wrong in order, right in total".
// The store that answers a Remaining read before its atomic decision
// admits exactly its limit under the count of TestExactUnderConcurrency
// (4 replicas × 32 goroutines on one key, 1024 requests for 300), which
// cannot tell it from a correct store; the checker can: a run with stale
// answers is Illegal.
func TestLinearizableCatchesStaleAnswer(t *testing.T) {
	srv := redistest.Start(t)
	var stores []sluice.Store
	var lims []*sluice.Limiter
	stale := new(atomic.Int64)
	frozen := storetest.NewClock()
	for _, s := range serverStores(t, srv.Addr, 4, prefix()) {
		st := staleStore{Store: s, stale: stale}
		stores, lims = append(stores, st), append(lims, sluice.New(st, sluice.WithClock(frozen.Now)))
	}
	l := sluice.Per(300, 3*linear.Tick).Using(sluice.FixedWindow)
	if got := storetest.Hammer(t, lims, "stale-count", 32, 8, l); got != 300 {
		t.Fatalf("the stale store admitted %d, want exactly 300: it decides atomically", got)
	}
	t.Logf("the count of admits passes it: 300 admitted, exactly the limit, with %d stale answers", stale.Swap(0))
	r := linear.Run{Stores: stores, Clients: 8, Rounds: 4, PerRound: 8, Tick: linear.Tick,
		Keys: []linear.Key{{Name: "stale", Limits: []sluice.Limit{sluice.Per(1000, 3*linear.Tick).Using(sluice.FixedWindow)}}}}
	requireCaught(t, r, "stale answers", func() int64 { return stale.Swap(0) })
}
