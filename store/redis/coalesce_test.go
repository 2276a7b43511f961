//go:build integration

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/internal/testing/testutil"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/redis/goredis"
	"github.com/sluice-go/sluice/store/storetest"
)

// eventually waits, up to 10 seconds, for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Until(t, 10*time.Second, what, cond)
}

// scriptCalls returns how many script calls (EVALSHA and EVAL) the server
// ran.
func scriptCalls(t *testing.T, c rueidis.Client) int {
	t.Helper()
	return commandCalls(t, c, "evalsha") + commandCalls(t, c, "eval")
}

// TestCoalesceForms: many goroutines deciding at once on distinct keys
// share script calls (far fewer calls than decisions, batches no larger
// than WithBatch), every decision answered as alone; with WithBatch(1)
// each decision is its own call, so the count is what tells them apart.
func TestCoalesceForms(t *testing.T) {
	srv := redistest.Start(t)
	admin := newRueidis(t, srv.Addr)
	const workers, each = 64, 30
	l := sluice.PerMinute(1000).Using(sluice.GCRA)
	for _, tc := range []struct {
		name   string
		batch  int
		client string
	}{
		{"rueidis", 0, "rueidis"},
		{"rueidis/batch 4", 4, "rueidis"},
		{"go-redis", 0, "go-redis"},
		{"off", 1, "rueidis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []redis.Option{prefix()}
			if tc.batch > 0 {
				opts = append(opts, redis.WithBatch(tc.batch))
			}
			var store *redis.Store
			if tc.client == "rueidis" {
				store = redis.FromRueidis(newRueidis(t, srv.Addr), opts...)
			} else {
				store = goredis.New(newGoRedis(t, srv.Addr), opts...)
			}
			lim := sluice.New(store)
			if err := admin.Do(context.Background(), admin.B().ConfigResetstat().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						key := "k" + strconv.Itoa(w*each+i)
						r, err := lim.Allow(context.Background(), key, l)
						if err != nil || !r.Allowed || r.Remaining != 999 {
							t.Errorf("%s: %+v, %v; want admitted, 999 remaining", key, r, err)
							return
						}
					}
				})
			}
			wg.Wait()
			calls := scriptCalls(t, admin)
			batches, decisions, largest := store.Coalesced()
			t.Logf("%d decisions in %d script calls; %d batches carried %d decisions, at most %d", workers*each, calls, batches, decisions, largest)
			if tc.batch == 1 {
				if calls != workers*each || batches != 0 {
					t.Errorf("coalescing off: %d script calls, %d batches; want %d calls, no batch", calls, batches, workers*each)
				}
				return
			}
			if calls*2 > workers*each || batches == 0 {
				t.Errorf("%d script calls for %d decisions (%d batches); want at most half as many calls", calls, workers*each, batches)
			}
			if tc.batch > 0 && largest > int64(tc.batch) {
				t.Errorf("a batch carried %d decisions, more than WithBatch(%d)", largest, tc.batch)
			}
		})
	}
}

// TestCoalesceExact: 256 goroutines over two replicas (rueidis and
// go-redis) on three hot keys, every algorithm, admit exactly each key's
// limit, in batches: every request of a batch on one key sees what the
// ones before it consumed.
func TestCoalesceExact(t *testing.T) {
	srv := redistest.Start(t)
	stores := []*redis.Store{
		redis.FromRueidis(newRueidis(t, srv.Addr)),
		goredis.New(newGoRedis(t, srv.Addr)),
	}
	const workers, attempts, limit = 128, 4, 100 // per store
	keys := []string{"a", "b", "c"}
	for _, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			l := sluice.PerDay(limit).Using(a)
			var mu sync.Mutex
			admitted := map[string]int{}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, s := range stores {
				lim := sluice.New(s)
				for w := range workers {
					wg.Go(func() {
						<-start
						for i := range attempts {
							key := string(a) + "-" + keys[(w+i)%len(keys)]
							r, err := lim.Allow(context.Background(), key, l)
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								mu.Lock()
								admitted[key]++
								mu.Unlock()
							}
						}
					})
				}
			}
			close(start)
			wg.Wait()
			for _, k := range keys {
				if got := admitted[string(a)+"-"+k]; got != limit {
					t.Errorf("key %s admitted %d, want exactly %d", k, got, limit)
				}
			}
		})
	}
	for i, s := range stores {
		if batches, decisions, _ := s.Coalesced(); batches == 0 {
			t.Errorf("store %d sent no batch (%d decisions batched): the test did not exercise coalescing", i, decisions)
		}
	}
}

// TestBatchScript: batch.lua decides a batch as take.lua decides its
// requests one after another at their instants: random batches mixing the
// algorithms, keys repeated within a batch, costs 0 (peeks) to 3, requests
// of two limits and of two parts, give exactly the Results of the same
// requests sent one by one to a store that does not coalesce.
func TestBatchScript(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	rng := rand.New(rand.NewPCG(12, 34))
	base := time.Now().Truncate(time.Second)
	ctx := context.Background()
	limitsOf := func(a sluice.Algorithm) sluice.Limit {
		switch rng.IntN(3) {
		case 0:
			return sluice.PerSecond(3).Using(a)
		case 1:
			return sluice.PerMinute(5).Using(a)
		default:
			return sluice.Limit{Algorithm: a, Limit: 4, Period: 10 * time.Second}
		}
	}
	// Rounds of the general form (a request of several limits), then of
	// the compact one (one limit each; up to 15 distinct limits, costs
	// from 0 to 3, a third at the server's clock), then of the general one
	// again for one-limit requests that the compact form cannot carry:
	// more distinct limits than it takes, or a cost too large for it.
	for round := range 50 {
		form := "general"
		switch {
		case round >= 40:
			form = "many limits"
		case round >= 20:
			form = "compact"
		}
		batched := redis.FromRueidis(c, prefix())
		alone := redis.FromRueidis(c, prefix(), redis.WithBatch(1))
		reqs := make([]sluice.Request, 40)
		at := base.Add(time.Duration(round) * time.Minute)
		for i := range reqs {
			at = at.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
			key := "k" + strconv.Itoa(rng.IntN(3))
			a := sluice.Algorithms[rng.IntN(len(sluice.Algorithms))]
			p := sluice.Part{Key: key, Limits: []sluice.Limit{limitsOf(a)}, Cost: rng.IntN(4)}
			req := sluice.Request{Parts: []sluice.Part{p}, Now: at}
			switch form {
			case "general":
				switch rng.IntN(4) {
				case 0: // two limits, two algorithms
					b := sluice.Algorithms[(slicesIndex(a)+1+rng.IntN(len(sluice.Algorithms)-1))%len(sluice.Algorithms)]
					req.Parts[0].Limits = append(req.Parts[0].Limits, limitsOf(b))
				case 1: // two parts, one server: one group
					req.Parts = append(req.Parts, sluice.Part{Key: "other" + key, Limits: []sluice.Limit{limitsOf(a)}, Cost: rng.IntN(3)})
				}
			case "compact":
				if rng.IntN(3) == 0 {
					req.Now = time.Time{} // the server's clock
				}
			case "many limits": // 17 distinct limits, or more
				req.Parts[0].Limits[0] = sluice.Limit{Algorithm: a, Limit: 5 + i%17, Period: time.Minute}
			}
			reqs[i] = req
		}
		if round == 49 && strconv.IntSize == 64 {
			// A cost above the compact form's bound, in a batch of one
			// distinct limit.
			big := int64(1) << 33
			l := sluice.Limit{Algorithm: sluice.FixedWindow, Limit: int(big), Period: time.Hour}
			for i := range reqs {
				reqs[i].Parts[0].Limits[0] = l
				reqs[i].Parts[0].Cost = [...]int{0, 1, int(big / 2)}[i%3]
			}
		}
		if got := batched.BatchCompact(reqs); got != (form == "compact") {
			t.Fatalf("round %d (%s): compact form %v", round, form, got)
		}
		got, nows, err := batched.TakeBatch(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		server := int64(0) // the server's instant of the batch
		for i, req := range reqs {
			if req.Now.IsZero() {
				// The oracle decides at the instant the batch did.
				if server == 0 {
					server = nows[i]
				}
				if nows[i] != server {
					t.Fatalf("round %d, request %d decided at %d, want the batch's server instant %d", round, i, nows[i], server)
				}
				req.Now = time.UnixMicro(server)
			} else if nows[i] != req.Now.UnixMicro() {
				t.Errorf("round %d, request %d decided at %d, want its own now %d", round, i, nows[i], req.Now.UnixMicro())
			}
			want, err := alone.Take(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got[i], want) {
				t.Fatalf("round %d (%s), request %d (%+v): batched %+v, alone %+v", round, form, i, req, got[i], want)
			}
		}
		if form == "compact" && server == 0 {
			t.Fatalf("round %d: no request at the server's clock", round)
		}
	}

	// Without a Now of their own, the requests of a batch share one
	// server instant; a request with its own keeps it.
	store := redis.FromRueidis(c, prefix())
	l := sluice.PerMinute(2).Using(sluice.SlidingLog)
	own := time.Now().Add(-time.Hour)
	reqs := []sluice.Request{
		{Parts: []sluice.Part{{Key: "s", Limits: []sluice.Limit{l}, Cost: 1}}},
		{Parts: []sluice.Part{{Key: "own", Limits: []sluice.Limit{l}, Cost: 1}}, Now: own},
		{Parts: []sluice.Part{{Key: "s", Limits: []sluice.Limit{l}, Cost: 1}}},
		{Parts: []sluice.Part{{Key: "s", Limits: []sluice.Limit{l}, Cost: 1}}},
	}
	got, nows, err := store.TakeBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if nows[0] != nows[2] || nows[0] != nows[3] || nows[1] != own.UnixMicro() {
		t.Errorf("nows %v: want the server's instant for 0, 2 and 3, %d for 1", nows, own.UnixMicro())
	}
	if d := time.Since(time.UnixMicro(nows[0])); d < -time.Minute || d > time.Minute {
		t.Errorf("server instant %d is %v from now", nows[0], d)
	}
	if !got[0][0].Allowed || !got[2][0].Allowed || got[3][0].Allowed {
		t.Errorf("2 per minute at one instant: %+v; want admitted, admitted, denied", got)
	}
}

func slicesIndex(a sluice.Algorithm) int {
	for i, b := range sluice.Algorithms {
		if a == b {
			return i
		}
	}
	return -1
}

// paused holds the script calls of a store: it pauses the server's writes
// (scripts included), sends the decisions that fill the store's calls in
// flight (MaxInFlight), and returns their errors' channel; later decisions
// queue. The
// pause lasts until unpause (or 60 s), and the server is stopped when the
// test ends, before the clients close.
func paused(t *testing.T, srv *redistest.Server, admin rueidis.Client, store *redis.Store) (inflight chan error, unpause func()) {
	t.Helper()
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	if err := admin.Do(ctx, admin.B().ClientPause().Timeout(60000).Write().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	inflight = make(chan error, redis.MaxInFlight)
	for i := range redis.MaxInFlight {
		go func() {
			_, err := store.Take(ctx, one("inflight"+strconv.Itoa(i), 1))
			inflight <- err
		}()
	}
	eventually(t, "the calls in flight", func() bool { busy, _ := store.Lanes(); return busy == redis.MaxInFlight })
	return inflight, func() {
		if err := admin.Do(ctx, admin.B().ClientUnpause().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// window is the limit of the queueing tests.
var window = sluice.PerDay(10).Using(sluice.FixedWindow)

// one is a request of cost on key under window.
func one(key string, cost int) sluice.Request {
	return sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{window}, Cost: cost}}}
}

// queue sends the decision of cost on each of keys, in order, each once
// the one before it is queued, and returns their errors' channels.
func queue(t *testing.T, ctx context.Context, store *redis.Store, cost int, keys ...string) []chan error {
	t.Helper()
	_, before := store.Lanes()
	errs := make([]chan error, len(keys))
	for i, k := range keys {
		errs[i] = make(chan error, 1)
		go func() {
			_, err := store.Take(ctx, one(k, cost))
			errs[i] <- err
		}()
		eventually(t, k+" queued", func() bool { _, q := store.Lanes(); return q == before+i+1 })
	}
	return errs
}

// within returns what ch delivers within 10 seconds.
func within(t *testing.T, what string, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer within 10 s", what)
		return nil
	}
}

// TestCoalesceCancel: a decision whose context ends while it waits in the
// queue returns the context's error at once and is not taken; the
// decisions queued around it go on as one batch.
func TestCoalesceCancel(t *testing.T) {
	srv := redistest.Start(t)
	admin := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(newRueidis(t, srv.Addr))
	inflight, unpause := paused(t, srv, admin, store)
	ctx := context.Background()
	first := queue(t, ctx, store, 1, "first")
	cctx, cancel := context.WithCancel(ctx)
	canceled := queue(t, cctx, store, 5, "canceled")
	last := queue(t, ctx, store, 1, "last")
	cancel()
	if err := within(t, "canceled", canceled[0]); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled while queued: %v, want context.Canceled", err)
	}
	if _, q := store.Lanes(); q != 2 {
		t.Errorf("%d decisions queued after the cancellation, want 2", q)
	}
	unpause()
	for what, ch := range map[string]chan error{"first": first[0], "last": last[0]} {
		if err := within(t, what, ch); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	for i := range redis.MaxInFlight {
		if err := within(t, "in flight", inflight); err != nil {
			t.Errorf("in flight %d: %v", i, err)
		}
	}
	if batches, decisions, _ := store.Coalesced(); batches != 1 || decisions != 2 {
		t.Errorf("%d batches of %d decisions, want 1 of 2 (first and last)", batches, decisions)
	}
	for key, want := range map[string]int{"first": 9, "last": 9, "canceled": 10} {
		rs, err := store.Take(ctx, one(key, 0))
		if err != nil || rs[0].Remaining != want {
			t.Errorf("%s after: %+v, %v; want %d remaining", key, rs, err, want)
		}
	}
}

// TestCoalesceErrors: an error of a batch's call reaches every one of its
// decisions (a script that fails: writes refused by an out-of-memory
// server), and a server that lost the scripts (SCRIPT FLUSH) gets their
// source, every decision of the batch then answered.
func TestCoalesceErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("OOM", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := newRueidis(t, srv.Addr)
		store := redis.FromRueidis(newRueidis(t, srv.Addr))
		inflight, unpause := paused(t, srv, admin, store)
		errs := queue(t, ctx, store, 1, "a", "b", "c", "d")
		if err := admin.Do(ctx, admin.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		unpause()
		for range redis.MaxInFlight {
			errs = append(errs, inflight)
		}
		for i, ch := range errs {
			if err := within(t, fmt.Sprint("decision ", i), ch); err == nil || !strings.Contains(err.Error(), "OOM") {
				t.Errorf("decision %d: %v, want the server's OOM error", i, err)
			}
		}
		if batches, decisions, _ := store.Coalesced(); batches != 1 || decisions != 4 {
			t.Errorf("%d batches of %d decisions, want 1 of 4", batches, decisions)
		}
		if err := admin.Do(ctx, admin.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "0").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if rs, err := store.Take(ctx, one("a", 1)); err != nil || !rs[0].Allowed || rs[0].Remaining != 9 {
			t.Errorf("after the OOM: %+v, %v; want admitted with 9 remaining (the failed batch took nothing)", rs, err)
		}
	})
	t.Run("NOSCRIPT", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := newRueidis(t, srv.Addr)
		store := redis.FromRueidis(newRueidis(t, srv.Addr))
		if err := admin.Do(ctx, admin.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		inflight, unpause := paused(t, srv, admin, store)
		errs := queue(t, ctx, store, 1, "a", "b", "c")
		unpause()
		for range redis.MaxInFlight {
			errs = append(errs, inflight)
		}
		for i, ch := range errs {
			if err := within(t, fmt.Sprint("decision ", i), ch); err != nil {
				t.Errorf("decision %d: %v", i, err)
			}
		}
		if batches, decisions, _ := store.Coalesced(); batches != 1 || decisions != 3 {
			t.Errorf("%d batches of %d decisions, want 1 of 3", batches, decisions)
		}
		// The take script (for those in flight) and the batch script
		// were each sent by source at least once, after NOSCRIPT.
		if n := commandCalls(t, admin, "eval"); n < 2 {
			t.Errorf("%d EVALs after SCRIPT FLUSH, want at least 2 (take and batch scripts)", n)
		}
		for _, k := range []string{"a", "b", "c"} {
			if rs, err := store.Take(ctx, one(k, 0)); err != nil || rs[0].Remaining != 9 {
				t.Errorf("%s after: %+v, %v; want 9 remaining", k, rs, err)
			}
		}
	})
}

// clusterCoalesce: on a Cluster, decisions coalesce slot by slot: 256
// goroutines over two replicas on two hot keys (one under two limits)
// admit exactly the limit, in batches; and a batch that the Cluster
// refuses while its slot migrates (its keys split between the masters:
// TRYAGAIN) is sent again decision by decision, each answered.
func clusterCoalesce(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	t.Run("Exact", func(t *testing.T) {
		stores := clusterStores(t, c, 2, prefix())
		one := sluice.PerDay(100).Using(sluice.GCRA)
		two := []sluice.Limit{sluice.PerDay(100).Using(sluice.FixedWindow), sluice.PerDay(50).Using(sluice.SlidingWindow)}
		var mu sync.Mutex
		admitted := map[string]int{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, s := range stores {
			lim := sluice.New(s)
			for w := range 128 {
				wg.Go(func() {
					<-start
					for i := range 4 {
						key, limits := "hot-one", []sluice.Limit{one}
						if (w+i)%2 == 1 {
							key, limits = "hot-two", two
						}
						r, err := lim.AllowAll(ctx, key, 1, limits...)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							mu.Lock()
							admitted[key]++
							mu.Unlock()
						}
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if admitted["hot-one"] != 100 || admitted["hot-two"] != 50 {
			t.Errorf("admitted %v, want exactly 100 of hot-one and 50 of hot-two", admitted)
		}
		var batches int64
		for _, s := range stores {
			b, _, _ := s.Coalesced()
			batches += b
		}
		if batches == 0 {
			t.Error("no batch sent: the test did not exercise coalescing on a Cluster")
		}
	})
	t.Run("TryAgain", func(t *testing.T) {
		store := clusterStores(t, c, 1, prefix())[0]
		l1, l2 := sluice.PerDay(10).Using(sluice.FixedWindow), sluice.PerDay(10).Using(sluice.GCRA)
		req := func(l sluice.Limit) sluice.Request {
			return sluice.Request{Parts: []sluice.Part{{Key: "mig", Limits: []sluice.Limit{l}, Cost: 1}}}
		}
		for _, l := range []sluice.Limit{l1, l2} {
			if _, err := store.Take(ctx, req(l)); err != nil {
				t.Fatal(err)
			}
		}
		slot := c.KeySlot(t, store.Key("mig", l1))
		var to string
		for _, addr := range c.Addrs {
			if addr != c.Owner(t, slot) {
				to = addr
				break
			}
		}
		m := c.BeginMigration(t, slot, to)
		m.Move(t, store.Key("mig", l1))
		batch := []sluice.Request{req(l1), req(l2), req(l1)}
		if _, _, err := store.TakeBatch(ctx, batch); !errors.Is(err, redis.ErrTryAgain) {
			t.Errorf("the batch with its keys split between the masters: %v, want ErrTryAgain", err)
		}
		rs, errs := store.SendBatch(ctx, batch)
		m.MoveKeys(t, 100)
		m.Finish(t)
		for i, err := range errs {
			if err != nil || !rs[i][0].Allowed {
				t.Fatalf("decision %d of the refused batch: %+v, %v; want admitted", i, rs[i], err)
			}
		}
		got := map[int]bool{rs[0][0].Remaining: true, rs[2][0].Remaining: true}
		if !got[8] || !got[7] || rs[1][0].Remaining != 8 {
			t.Errorf("remaining %d, %d, %d; want 8 and 7 (in either order) for the first limit, 8 for the second", rs[0][0].Remaining, rs[2][0].Remaining, rs[1][0].Remaining)
		}
	})
}

// TestCoalesceSettles: many goroutines reserving and settling at once
// share script calls for their refunds and charges too (settle batches,
// far fewer calls than reserve+settle pairs), and the counts end exact:
// each key holds what its settles say, refunds and debts alike; with
// WithBatch(1) each settle is its own call.
func TestCoalesceSettles(t *testing.T) {
	srv := redistest.Start(t)
	admin := newRueidis(t, srv.Addr)
	const workers, each = 64, 20
	for _, tc := range []struct {
		name  string
		batch int
		algs  []sluice.Algorithm // key k's is algs[k % len(algs)]
	}{
		{"fixed_window", 0, []sluice.Algorithm{sluice.FixedWindow}},
		{"gcra", 0, []sluice.Algorithm{sluice.GCRA}},
		{"sliding_log", 0, []sluice.Algorithm{sluice.SlidingLog}},
		// Settles under different limits in one call: runs of one key.
		{"mixed", 0, []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA, sluice.SlidingWindow}},
		{"off", 1, []sluice.Algorithm{sluice.FixedWindow}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []redis.Option{prefix()}
			if tc.batch > 0 {
				opts = append(opts, redis.WithBatch(tc.batch))
			}
			store := redis.FromRueidis(newRueidis(t, srv.Addr), opts...)
			// One instant for every call: no refill and no window's end
			// to make the counts anything but the settles' sum.
			at := storetest.Epoch.Add(time.Minute)
			lim := sluice.New(store, sluice.WithClock(func() time.Time { return at }))
			limit := func(k int) sluice.Limit { return sluice.PerHour(1000).Using(tc.algs[k%len(tc.algs)]) }
			if err := admin.Do(context.Background(), admin.B().ConfigResetstat().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					key, l := "k"+strconv.Itoa(w%16), limit(w%16) // 4 workers per key
					for i := range each {
						r, err := lim.Reserve(context.Background(), key, l, 10)
						if err != nil || !r.Allowed {
							t.Errorf("%s: %+v, %v; want admitted", key, r.MultiResult, err)
							return
						}
						actual := 2 + (w+i)%3*6 // 2, 8 or 14: refunds, and charges beyond 10
						if _, err := r.Settle(context.Background(), actual); err != nil {
							t.Errorf("%s: settle: %v", key, err)
							return
						}
					}
				})
			}
			wg.Wait()
			calls := scriptCalls(t, admin)
			for k := range 16 {
				want := 0
				for w := k; w < workers; w += 16 {
					for i := range each {
						want += 2 + (w+i)%3*6
					}
				}
				r, err := lim.AllowN(context.Background(), "k"+strconv.Itoa(k), limit(k), 0)
				if err != nil || 1000-r.Remaining != want {
					t.Errorf("k%d: %d spent (%v), want %d: the settles are not exact", k, 1000-r.Remaining, err, want)
				}
			}
			pairs := workers * each
			t.Logf("%d reserve+settle pairs in %d script calls, %d settle batches", pairs, calls, store.SettleBatches())
			if tc.batch == 1 {
				if calls != 2*pairs || store.SettleBatches() != 0 {
					t.Errorf("coalescing off: %d script calls, %d settle batches; want %d, none", calls, store.SettleBatches(), 2*pairs)
				}
				return
			}
			if calls > pairs || store.SettleBatches() == 0 || store.RefundsWithDecisions() == 0 {
				t.Errorf("%d script calls for %d reserve+settle pairs (%d settle batches, %d with decisions); want at most one call per pair, refunds sent with decisions", calls, pairs, store.SettleBatches(), store.RefundsWithDecisions())
			}
		})
	}
}
