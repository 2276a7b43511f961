//go:build integration

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
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

// clusterRueidis connects a rueidis client to the cluster, closed when t
// ends. rueidis detects the cluster from the seed nodes.
func clusterRueidis(t testing.TB, c *redistest.Cluster) rueidis.Client {
	t.Helper()
	rc := newRueidis(t, c.Addrs...)
	if n := len(rc.Nodes()); n != len(c.Addrs) {
		t.Fatalf("rueidis sees %d nodes, want the cluster's %d: not in cluster mode", n, len(c.Addrs))
	}
	return rc
}

// clusterGoRedis connects a go-redis ClusterClient, closed when t ends.
func clusterGoRedis(t testing.TB, c *redistest.Cluster) *goredislib.ClusterClient {
	t.Helper()
	gc := goredislib.NewClusterClient(&goredislib.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = gc.Close() })
	return gc
}

// clusterURL is the Open URL naming every node as a seed.
func clusterURL(c *redistest.Cluster) string {
	return "redis://" + c.Addrs[0] + "?addr=" + strings.Join(c.Addrs[1:], "&addr=")
}

// clusterStores returns n stores, each over its own cluster client:
// rueidis for even i, go-redis for odd i.
func clusterStores(t testing.TB, c *redistest.Cluster, n int, opts ...redis.Option) []*redis.Store {
	return replicaStores(n,
		func() rueidis.Client { return clusterRueidis(t, c) },
		func() *goredislib.ClusterClient { return clusterGoRedis(t, c) }, opts...)
}

// TestCluster runs the store on one three-master Redis Cluster (started
// once: it takes seconds), through rueidis and go-redis cluster clients:
// the conformance suite, exactness under concurrency, the spread of keys
// over the masters, a live slot migration, decisions split over slots,
// and linearizability.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	t.Run("Conformance", func(t *testing.T) { clusterConformance(t, c) })
	t.Run("Exact", func(t *testing.T) { exactSuite(t, clusterStores(t, c, replicas)) })
	t.Run("SettleExact", func(t *testing.T) { clusterSettleExact(t, c) })
	t.Run("Spread", func(t *testing.T) { clusterSpread(t, c) })
	t.Run("SlotMigration", func(t *testing.T) { clusterSlotMigration(t, c) })
	t.Run("TryAgain", func(t *testing.T) { clusterTryAgain(t, c) })
	t.Run("Moved", func(t *testing.T) { clusterMoved(t, c) })
	t.Run("Slot", func(t *testing.T) { clusterSlot(t, c) })
	t.Run("Stacked", func(t *testing.T) { clusterStacked(t, c) })
	t.Run("SplitResults", func(t *testing.T) { clusterSplitResults(t, c) })
	t.Run("Coalesce", func(t *testing.T) { clusterCoalesce(t, c) })
	t.Run("WaitRefused", func(t *testing.T) { clusterWaitRefused(t, c) })
	t.Run("Linearizable", func(t *testing.T) { clusterLinearizable(t, c) })
}

// clusterConformance runs the conformance suite through Open (a rueidis
// cluster client found from the URL's seed nodes) and through a go-redis
// ClusterClient.
func clusterConformance(t *testing.T, c *redistest.Cluster) {
	t.Run("Open", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, _ func() time.Time) sluice.Store {
			s, err := redis.Open(clusterURL(c), prefix())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return s
		})
	})
	t.Run("go-redis", func(t *testing.T) {
		gc := clusterGoRedis(t, c)
		storetest.Run(t, func(t *testing.T, _ func() time.Time) sluice.Store {
			return goredis.New(gc, prefix())
		})
	})
}

// clusterSpread: the keys of many client keys land on all three masters,
// every key of one client key on one master, so that the cluster tests
// exercise every node.
func clusterSpread(t *testing.T, c *redistest.Cluster) {
	const clientKeys = 60
	p := fmt.Sprintf("spread%d", prefixes.Add(1))
	lims := limitersOver(clusterStores(t, c, 2, redis.WithPrefix(p)), same())
	var limits []sluice.Limit
	for _, a := range sluice.Algorithms {
		limits = append(limits, sluice.PerMinute(10).Using(a))
	}
	for i := range clientKeys {
		r, err := lims[i%2].AllowAll(context.Background(), fmt.Sprintf("client-%d", i), 1, limits...)
		if err != nil || !r.Allowed {
			t.Fatalf("client-%d: %+v, %v", i, r, err)
		}
	}
	total := 0
	tags := map[string]string{} // hash tag → the master holding its keys
	tag := regexp.MustCompile(`\{[^}]*\}`)
	for _, addr := range c.Addrs {
		keys, _ := c.Do(t, addr, "KEYS", p+":*").([]any)
		t.Logf("master %s holds %d keys", addr, len(keys))
		if len(keys) == 0 {
			t.Errorf("master %s holds none of the keys of %d client keys", addr, clientKeys)
		}
		total += len(keys)
		for _, k := range keys {
			tg := tag.FindString(k.(string))
			if other, ok := tags[tg]; ok && other != addr {
				t.Errorf("the keys of %s are on %s and %s", tg, other, addr)
			}
			tags[tg] = addr
		}
	}
	if want := clientKeys * len(limits); total != want {
		t.Errorf("the masters hold %d keys, want %d (one per client key and limit)", total, want)
	}
}

// clusterLane is one stream of decisions on the live key during a
// migration: one limit, or several checked together. Its workers send a
// request for each permit the test grants, so that the test decides how
// many requests each phase holds.
type clusterLane struct {
	name     string
	limits   []sluice.Limit
	want     int           // admitted in all
	permits  chan struct{} // one per request still to send
	granted  int           // permits granted so far (by the test goroutine)
	requests atomic.Int64  // requests answered
	admitted atomic.Int64
	errors   atomic.Int64
}

// grant lets the lane's workers send n more requests.
func (ln *clusterLane) grant(n int) {
	for range n {
		ln.permits <- struct{}{}
	}
	ln.granted += n
}

// clusterErrorStats returns node addr's INFO errorstats counts by error
// prefix (MOVED, ASK, TRYAGAIN, NOSCRIPT...).
func clusterErrorStats(t *testing.T, c *redistest.Cluster, addr string) map[string]int {
	t.Helper()
	info, _ := c.Do(t, addr, "INFO", "errorstats").(string)
	out := map[string]int{}
	for code, fields := range infoStats(info, "errorstat_") {
		out[code], _ = strconv.Atoi(fields["count"])
	}
	return out
}

// clusterSlotMigration: while replicas (rueidis and go-redis) decide one
// client key under each algorithm and under a two-limit decision, the slot
// holding it moves to another master: first marked, then the multi-limit
// decision's keys split between the two masters, then every key moved
// (clients are sent there with ASK), then the slot handed over (MOVED).
// Each phase holds a fixed number of requests per lane, so that no limit
// is reached before the slot is handed over: until then every request is
// admitted, and afterwards each limit admits exactly the rest of its count.
// No request fails, and the keys end up on the new master.
func clusterSlotMigration(t *testing.T, c *redistest.Cluster) {
	stores := clusterStores(t, c, 4, prefix())
	frozen := storetest.NewClock()
	lims := limitersOver(stores, same(sluice.WithClock(frozen.Now)))
	const key = "live"

	// Before the handover each lane sends step requests in each of three
	// phases, and the multi-limit lane split more while its keys are on
	// two masters: 3*step+split, below every limit. After it, each lane
	// sends the rest of its limit, and step more, which are denied.
	const (
		step  = 40
		split = 8
	)
	// Per day: Redis expires keys on its own clock, and a minute's
	// gcra or token_bucket state could expire between two phases while the
	// frozen clock stands still.
	var lanes []*clusterLane
	for _, a := range sluice.Algorithms {
		lanes = append(lanes, &clusterLane{name: string(a), limits: []sluice.Limit{sluice.PerDay(400).Using(a)}, want: 400})
	}
	loose := sluice.PerMinute(500).Using(sluice.FixedWindow)
	tight := sluice.PerMinute(300).Using(sluice.SlidingLog)
	multi := &clusterLane{name: "multi", limits: []sluice.Limit{loose, tight}, want: 300}
	lanes = append(lanes, multi)
	for _, ln := range lanes {
		if 3*step+split >= ln.want {
			t.Fatalf("%s: the phases before the handover hold up to %d requests, not below its limit %d", ln.name, 3*step+split, ln.want)
		}
		ln.permits = make(chan struct{}, ln.want+step)
	}

	var redisKeys []string
	for _, ln := range lanes {
		for _, l := range ln.limits {
			redisKeys = append(redisKeys, stores[0].Key(key, l))
		}
	}
	slot := c.KeySlot(t, redisKeys[0])
	from := c.Owner(t, slot)
	to := c.Addrs[0]
	if to == from {
		to = c.Addrs[1]
	}

	// Two workers per lane and replica. The context ends them: on success
	// once every permit has been used, so that no request is in flight;
	// and, through the cleanup, when the test fails midway.
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr = map[string]error{}
	)
	for _, lim := range lims {
		for _, ln := range lanes {
			for range 2 {
				wg.Go(func() {
					for {
						select {
						case <-ctx.Done():
							return
						case <-ln.permits:
						}
						r, err := lim.AllowAll(ctx, key, 1, ln.limits...)
						switch {
						case err != nil:
							ln.errors.Add(1)
							errMu.Lock()
							if firstErr[ln.name] == nil {
								firstErr[ln.name] = err
							}
							errMu.Unlock()
						case r.Allowed:
							ln.admitted.Add(1)
						}
						ln.requests.Add(1)
					}
				})
			}
		}
	}
	halt := func() {
		cancel()
		wg.Wait()
	}
	t.Cleanup(halt)

	// waitFor waits until done reports true. Its deadline only guards
	// against a hang.
	waitFor := func(phase string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for !done() {
			if time.Now().After(deadline) {
				for _, ln := range lanes {
					t.Logf("%s: %d of %d requests answered", ln.name, ln.requests.Load(), ln.granted)
				}
				t.Fatalf("%s: traffic stalled", phase)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// answered waits until every request granted so far is answered.
	answered := func(phase string) {
		t.Helper()
		waitFor(phase, func() bool {
			for _, ln := range lanes {
				if ln.requests.Load() < int64(ln.granted) {
					return false
				}
			}
			return true
		})
	}
	// phase lets each lane send n more requests and waits for the answers.
	phase := func(name string, n int) {
		t.Helper()
		for _, ln := range lanes {
			ln.grant(n)
		}
		answered(name)
	}

	phase("before", step)
	// The target forgets the scripts, as a master new to the cluster would
	// not have them: the store must load them there mid-migration.
	c.Do(t, to, "SCRIPT", "FLUSH")
	src0, dst0 := clusterErrorStats(t, c, from), clusterErrorStats(t, c, to)
	m := c.BeginMigration(t, slot, to)
	phase("slot marked", step)
	// The multi-limit decision's keys now live on two masters: its requests
	// get TRYAGAIN, and the store sends them again until the other key
	// follows. It does so for at most 2s, so the keys stay split only
	// until the old master has refused one, and only that lane sends.
	m.Move(t, stores[0].Key(key, tight))
	multi.grant(split)
	waitFor("keys split", func() bool { return clusterErrorStats(t, c, from)["TRYAGAIN"] > src0["TRYAGAIN"] })
	moved := m.MoveKeys(t, 2)
	// The refused requests are decided now, with the others of this phase.
	phase("keys moved", step)
	m.Finish(t)
	for _, ln := range lanes {
		// Every request so far was below the limit.
		if got, sent := ln.admitted.Load(), ln.requests.Load(); got != sent {
			t.Errorf("%s: admitted %d of the %d requests before the slot was handed over, all of them below the limit %d", ln.name, got, sent, ln.want)
		}
	}
	for _, ln := range lanes {
		ln.grant(ln.want + step - ln.granted)
	}
	answered("slot handed over")
	halt()

	for _, ln := range lanes {
		t.Logf("%s: %d requests, %d admitted, %d errors", ln.name, ln.requests.Load(), ln.admitted.Load(), ln.errors.Load())
		if n := ln.errors.Load(); n > 0 {
			t.Errorf("%s: %d requests failed during the migration; the first: %v", ln.name, n, firstErr[ln.name])
		}
		if got := ln.admitted.Load(); got != int64(ln.want) {
			t.Errorf("%s: admitted %d of %d requests across the migration, want exactly %d", ln.name, got, ln.requests.Load(), ln.want)
		}
	}
	if r, err := lims[0].AllowN(context.Background(), key, loose, 0); err != nil || r.Remaining != 200 {
		t.Errorf("%s after the migration: %+v, %v; want 200 remaining (denied requests consume nothing)", loose, r, err)
	}
	// Other subtests' keys may share the slot: MoveKeys moved them too.
	if moved < len(redisKeys)-1 {
		t.Errorf("MoveKeys moved %d keys, want at least %d", moved, len(redisKeys)-1)
	}
	if got := c.Owner(t, slot); got != to {
		t.Errorf("slot %d is served by %s after the migration, want %s", slot, got, to)
	}
	if n := c.CountKeysInSlot(t, from, slot); n != 0 {
		t.Errorf("the old master still holds %d keys of slot %d", n, slot)
	}
	for _, k := range redisKeys {
		if n := c.Do(t, to, "EXISTS", k); n != int64(1) {
			t.Errorf("key %s is not on the new master %s", k, to)
		}
	}
	src, dst := clusterErrorStats(t, c, from), clusterErrorStats(t, c, to)
	delta := func(now, before map[string]int, code string) int { return now[code] - before[code] }
	t.Logf("moved %d keys; the old master %s answered ASK %d, TRYAGAIN %d, MOVED %d times; the new master %s answered NOSCRIPT %d times",
		moved, from, delta(src, src0, "ASK"), delta(src, src0, "TRYAGAIN"), delta(src, src0, "MOVED"), to, delta(dst, dst0, "NOSCRIPT"))
	// TRYAGAIN was waited for above. The clients learn that the keys have
	// moved only from ASK (before the handover) and then MOVED.
	for _, code := range []string{"ASK", "MOVED"} {
		if delta(src, src0, code) == 0 {
			t.Errorf("the old master never answered %s: the test did not exercise that phase", code)
		}
	}
	if delta(dst, dst0, "NOSCRIPT") == 0 {
		t.Errorf("the new master never answered NOSCRIPT: the test did not exercise loading the scripts there")
	}
}

// clusterTryAgain: a new client key under two limits, in a slot being
// migrated, gets TRYAGAIN from the target for as long as the migration
// lasts (none of its keys exist on either master). The store sends the
// script again until its own bound or the caller's context ends, writes
// nothing meanwhile, and decides as soon as the slot has moved.
func clusterTryAgain(t *testing.T, c *redistest.Cluster) {
	p := fmt.Sprintf("tryagain%d", prefixes.Add(1))
	stores := clusterStores(t, c, 2, redis.WithPrefix(p))
	limits := []sluice.Limit{sluice.PerDay(10), sluice.PerHour(5).Using(sluice.SlidingLog)}
	req := sluice.Request{Parts: []sluice.Part{{Key: "stuck", Limits: limits, Cost: 1}}}
	slot := c.KeySlot(t, stores[0].Key(req.Parts[0].Key, limits[0]))
	var to string
	for _, addr := range c.Addrs {
		if addr != c.Owner(t, slot) {
			to = addr
			break
		}
	}
	m := c.BeginMigration(t, slot, to)
	for i, s := range stores {
		before := clusterErrorStats(t, c, to)["TRYAGAIN"]
		// No deadline: the store gives up by itself (after 2s), with the
		// refusal.
		rs, err := s.Take(context.Background(), req)
		if !errors.Is(err, redis.ErrTryAgain) {
			t.Errorf("store %d: Take during the migration = %+v, %v; want an error wrapping ErrTryAgain", i, rs, err)
		}
		// One attempt of the store gets one TRYAGAIN through rueidis,
		// which does not retry scripts, and at most two through go-redis,
		// which tries four times, each TRYAGAIN following an ASK from the
		// source: three or more mean that the store sent the script again.
		if n := clusterErrorStats(t, c, to)["TRYAGAIN"] - before; n < 3 {
			t.Errorf("store %d: the target answered TRYAGAIN %d times; want the script sent again until the store gave up", i, n)
		}
	}
	// A caller that gives up gets its cancellation, through the Limiter
	// too, and not the refusal (which an error policy would treat as an
	// outage).
	for i, s := range stores {
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(100*time.Millisecond, cancel)
		// A store timeout longer than the caller's patience: it is the
		// caller who gives up.
		lim := sluice.New(s, sluice.WithErrorPolicy(sluice.AllowOnError), sluice.WithStoreTimeout(10*time.Second))
		_, err := lim.AllowAll(ctx, req.Parts[0].Key, 1, limits...)
		stop.Stop()
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("store %d: AllowAll canceled during the migration = %v; want context.Canceled", i, err)
		}
	}
	for _, addr := range c.Addrs {
		if keys, _ := c.Do(t, addr, "KEYS", p+":*").([]any); len(keys) != 0 {
			t.Errorf("refused decisions wrote %q on %s", keys, addr)
		}
	}
	m.Finish(t)
	for i, s := range stores {
		rs, err := s.Take(context.Background(), req)
		if err != nil || len(rs) != 2 || !rs[0].Allowed || rs[0].Remaining != 9-i || rs[1].Remaining != 4-i {
			t.Errorf("store %d: Take after the migration = %+v, %v; want admitted with %d and %d remaining", i, rs, err, 9-i, 4-i)
		}
	}
}

// clusterMoved: a cluster client that stops following redirections
// (rueidis with MaxMovedRedirections, go-redis after MaxRedirects) returns
// MOVED while a slot is half migrated: its owner marked MIGRATING sends a
// new key to the target with ASK, and the target, not marked IMPORTING,
// sends it back with MOVED. Redis ran nothing, so the store, through
// either client, sends the script again until the slot is stable again.
func clusterMoved(t *testing.T, c *redistest.Cluster) {
	p := fmt.Sprintf("moved%d", prefixes.Add(1))
	rc := rueidisWith(t, rueidis.ClientOption{
		InitAddress:   c.Addrs,
		ClusterOption: rueidis.ClusterOption{MaxMovedRedirections: 1},
	})
	stores := []struct {
		name  string
		store *redis.Store
	}{
		{"rueidis", redis.FromRueidis(rc, redis.WithPrefix(p))},
		{"go-redis", goredis.New(clusterGoRedis(t, c), redis.WithPrefix(p))},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			l := sluice.PerMinute(5)
			req := sluice.Request{Parts: []sluice.Part{{Key: "half-" + s.name, Limits: []sluice.Limit{l}, Cost: 1}}}
			slot := c.KeySlot(t, s.store.Key(req.Parts[0].Key, l))
			from := c.Owner(t, slot)
			to := c.Addrs[0]
			if to == from {
				to = c.Addrs[1]
			}
			toID, _ := c.Do(t, to, "CLUSTER", "MYID").(string)
			before := clusterErrorStats(t, c, to)["MOVED"]
			c.Do(t, from, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "MIGRATING", toID)
			stable := sync.OnceFunc(func() { c.Do(t, from, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "STABLE") })
			defer stable()

			type result struct {
				rs  []sluice.Result
				err error
			}
			done := make(chan result, 1)
			go func() {
				rs, err := s.store.Take(context.Background(), req)
				done <- result{rs, err}
			}()
			// Once the target has answered MOVED, the migration ends.
			deadline := time.Now().Add(10 * time.Second)
			var r result
			answered := false
			for !answered && clusterErrorStats(t, c, to)["MOVED"] == before {
				if time.Now().After(deadline) {
					t.Fatalf("the target %s never answered MOVED", to)
				}
				select {
				case r = <-done: // too early: Take gave up on the first MOVED
					answered = true
				case <-time.After(time.Millisecond):
				}
			}
			stable()
			if !answered {
				r = <-done
			}
			if r.err != nil || len(r.rs) != 1 || !r.rs[0].Allowed || r.rs[0].Remaining != 4 {
				t.Errorf("Take while the target answered MOVED = %+v, %v; want it sent again until the slot was stable, then admitted with 4 remaining", r.rs, r.err)
			}
		})
	}
}

// clusterSettleExact is TestSettleExactUnderConcurrency on the Cluster:
// reserves and settles of one key, coalesced in its slot's lane (refunds
// in the decisions' script calls), leave it holding exactly the sum of
// the actual costs, under every algorithm.
func clusterSettleExact(t *testing.T, c *redistest.Cluster) {
	frozen := storetest.NewClock()
	lims := limitersOver(clusterStores(t, c, replicas, prefix()), same(sluice.WithClock(frozen.Now)))
	for _, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			l := sluice.PerDay(10_000).Using(a)
			consumed, want := hammerSettle(t, lims, "settle-"+string(a), l)
			if consumed != want {
				t.Errorf("%s holds %d consumed after settles that cost %d in all", l, consumed, want)
			}
		})
	}
}
