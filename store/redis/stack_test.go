//go:build integration

package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/redis/goredis"
	"github.com/sluice-go/sluice/store/storetest"
)

// stackWorkload is a login endpoint limited three ways, as stacked rules
// build it: per client address (each replica sends from its own address),
// per API key (one key, shared) and globally. Every request is one
// decision of three parts, cost 1 each: the address's first, or, with
// globalFirst, the global one first and the address's last.
type stackWorkload struct {
	name              string
	ip, api, global   sluice.Limit
	globalFirst       bool
	ips               []string // one per replica
	apiKey, globalKey string
}

// stackShape is the counts of the three limits of a workload; each run
// has one of them bind.
type stackShape struct {
	name            string
	ip, api, global int
}

// stackShapes: the API key's limit binds, then the addresses', then the
// global one; in the last, the addresses bind (160), the global limit a
// little above them.
var stackShapes = []stackShape{
	{name: "api binds", ip: 30, api: 200, global: 1000},
	{name: "ip binds", ip: 20, api: 400, global: 1000},
	{name: "global binds", ip: 40, api: 400, global: 120},
	{name: "global tight", ip: 20, api: 400, global: 165},
}

// stackWorkloads returns the workloads of a run: each algorithm on all
// three limits, with the shapes in turn; then, with the three limits on
// different algorithms, every shape in both orders. keys names the client
// keys.
func stackWorkloads(keys func(w *stackWorkload)) []stackWorkload {
	var ws []stackWorkload
	add := func(name string, sh stackShape, globalFirst bool, ip, api, global sluice.Algorithm) {
		w := stackWorkload{
			name:        fmt.Sprintf("%s/%s", name, sh.name),
			ip:          sluice.PerDay(sh.ip).Using(ip),
			api:         sluice.PerDay(sh.api).Using(api),
			global:      sluice.PerDay(sh.global).Using(global),
			globalFirst: globalFirst,
		}
		if globalFirst {
			w.name += "/global first"
		}
		keys(&w)
		ws = append(ws, w)
	}
	for i, a := range sluice.Algorithms {
		add(string(a), stackShapes[i%len(stackShapes)], false, a, a, a)
	}
	for _, globalFirst := range []bool{false, true} {
		for _, sh := range stackShapes {
			add("mixed", sh, globalFirst, sluice.SlidingLog, sluice.GCRA, sluice.FixedWindow)
		}
	}
	return ws
}

// standaloneKeys names the client keys on a server without slots.
func standaloneKeys(w *stackWorkload) {
	w.ips = nil
	for i := range replicas {
		w.ips = append(w.ips, fmt.Sprintf("10.0.0.%d", i+1))
	}
	w.apiKey, w.globalKey = "key-abc", "login"
}

// parts returns the decision of a request from replica i.
func (w stackWorkload) parts(i int) []sluice.Part {
	parts := []sluice.Part{
		{Key: w.ips[i], Limits: []sluice.Limit{w.ip}, Cost: 1},
		{Key: w.apiKey, Limits: []sluice.Limit{w.api}, Cost: 1},
		{Key: w.globalKey, Limits: []sluice.Limit{w.global}, Cost: 1},
	}
	if w.globalFirst {
		slices.Reverse(parts)
	}
	return parts
}

// want is what the exact all-or-nothing model admits when each of the
// replicas sends perReplica requests: with cost 1 and no refill, a request
// is denied only by a full limit, in any order, so the API key and the
// global limit admit until one is full or every address is.
func (w stackWorkload) want(perReplica int) int {
	return min(w.api.Capacity(), w.global.Capacity(), len(w.ips)*min(w.ip.Capacity(), perReplica))
}

// stackDecide decides one request from replica i through lim.
type stackDecide func(ctx context.Context, lim *sluice.Limiter, parts []sluice.Part) (bool, error)

// atomically is how a request is meant to be decided: one decision.
func atomically(ctx context.Context, lim *sluice.Limiter, parts []sluice.Part) (bool, error) {
	r, err := lim.AllowParts(ctx, parts...)
	return r.Allowed, err
}

// stackRun is what a run admitted, per replica (address) and in all.
type stackRun struct {
	perReplica []int
	total      int
}

// stackHammer sends, from goroutines goroutines per limiter (replica i
// sending from w.ips[i]), attempts requests each, all released at once,
// and counts the admitted ones. Any error fails t.
func stackHammer(t *testing.T, lims []*sluice.Limiter, w stackWorkload, decide stackDecide) stackRun {
	t.Helper()
	run := stackRun{perReplica: make([]int, len(lims))}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
	)
	start := make(chan struct{})
	for i, lim := range lims {
		parts := w.parts(i)
		for range goroutines {
			wg.Go(func() {
				<-start
				n := 0
				var err error
				for range attempts {
					var ok bool
					if ok, err = decide(context.Background(), lim, parts); err != nil {
						break
					}
					if ok {
						n++
					}
				}
				mu.Lock()
				defer mu.Unlock()
				run.perReplica[i] += n
				run.total += n
				if firstErr == nil {
					firstErr = err
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("%s: %v", w.name, firstErr)
	}
	return run
}

// overAdmitted returns how run broke a limit: admitted more than it allows.
func (w stackWorkload) overAdmitted(run stackRun) []string {
	var bad []string
	for i, n := range run.perReplica {
		if n > w.ip.Capacity() {
			bad = append(bad, fmt.Sprintf("address %s admitted %d, over its %s", w.ips[i], n, w.ip))
		}
	}
	for _, l := range []sluice.Limit{w.api, w.global} {
		if run.total > l.Capacity() {
			bad = append(bad, fmt.Sprintf("%s admitted %d", l, run.total))
		}
	}
	return bad
}

// residue returns every key whose state, read through lim at cost 0, is
// not its admitted count: denied requests (and refunds) must leave none.
func (w stackWorkload) residue(t *testing.T, lim *sluice.Limiter, run stackRun) []string {
	t.Helper()
	var bad []string
	check := func(key string, l sluice.Limit, admitted int) {
		r, err := lim.AllowN(context.Background(), key, l, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := l.Capacity() - admitted; r.Remaining != want {
			bad = append(bad, fmt.Sprintf("%s of %q: %d remaining after %d admitted, want %d", l, key, r.Remaining, admitted, want))
		}
	}
	for i, ip := range w.ips {
		check(ip, w.ip, run.perReplica[i])
	}
	check(w.apiKey, w.api, run.total)
	check(w.globalKey, w.global, run.total)
	return bad
}

// exactStack checks a run on a store that decides atomically: no limit
// over its count, the model's total, and no residue.
func (w stackWorkload) exactStack(t *testing.T, lim *sluice.Limiter, run stackRun) []string {
	bad := w.overAdmitted(run)
	if want := w.want(goroutines * attempts); run.total != want {
		bad = append(bad, fmt.Sprintf("admitted %d, the all-or-nothing model admits %d", run.total, want))
	}
	return append(bad, w.residue(t, lim, run)...)
}

// TestStackedExact: on one server, replicas × goroutines sending requests
// of three parts (a per-address, a per-API-key and a global limit) admit
// exactly what the all-or-nothing model predicts, no limit admits more than
// its count, and denied requests consume nothing. The control decides each
// request with three separate calls, and the same checks catch it.
func TestStackedExact(t *testing.T) {
	srv := redistest.Start(t)
	frozen := storetest.NewClock()
	for _, w := range stackWorkloads(standaloneKeys) {
		t.Run(w.name, func(t *testing.T) {
			lims := limitersOver(serverStores(t, srv.Addr, replicas, prefix()), same(sluice.WithClock(frozen.Now)))
			run := stackHammer(t, lims, w, atomically)
			t.Logf("admitted %d (model %d), per address %v", run.total, w.want(goroutines*attempts), run.perReplica)
			for _, e := range w.exactStack(t, lims[0], run) {
				t.Error(e)
			}
		})
	}
	t.Run("control: three separate calls", func(t *testing.T) {
		w := stackWorkloads(standaloneKeys)[0]
		lims := limitersOver(serverStores(t, srv.Addr, replicas, prefix()), same(sluice.WithClock(frozen.Now)))
		run := stackHammer(t, lims, w, separately)
		bad := w.exactStack(t, lims[0], run)
		t.Logf("three separate calls: admitted %d (model %d); the checks found %q", run.total, w.want(goroutines*attempts), bad)
		if len(bad) == 0 {
			t.Errorf("deciding the three parts separately passed the checks; they cannot catch a decision that is not all or nothing")
		}
	})
}

// separately is the broken way to stack rules: one decision per part, the
// request admitted if all three admit it. A part denied by another has
// consumed anyway.
func separately(ctx context.Context, lim *sluice.Limiter, parts []sluice.Part) (bool, error) {
	ok := true
	for _, p := range parts {
		r, err := lim.AllowAll(ctx, p.Key, p.Cost, p.Limits...)
		if err != nil {
			return false, err
		}
		ok = ok && r.Allowed
	}
	return ok, nil
}

// keysOn returns n client keys, made from the format name and a number,
// whose state lies on the master at owner. It checks that the store
// computes their slots as the cluster does.
func keysOn(t *testing.T, c *redistest.Cluster, name, owner string, n int) []string {
	t.Helper()
	s := redis.New(nil)
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf(name, i)
		key := s.Key(k, sluice.PerDay(1))
		slot := c.KeySlot(t, key)
		if got := redis.Slot(key); got != slot {
			t.Fatalf("the store puts %s in slot %d, the cluster in %d", key, got, slot)
		}
		if c.Owner(t, slot) == owner {
			keys = append(keys, k)
		}
	}
	return keys
}

// clusterKeys names the client keys of the workloads on c so that each
// request's three parts lie on three masters: the addresses on the third,
// the API key on the first, the global key on the second.
func clusterKeys(t *testing.T, c *redistest.Cluster) func(w *stackWorkload) {
	t.Helper()
	ips := keysOn(t, c, "10.0.1.%d", c.Addrs[2], replicas)
	api := keysOn(t, c, "key-%d", c.Addrs[0], 1)[0]
	global := keysOn(t, c, "login-%d", c.Addrs[1], 1)[0]
	return func(w *stackWorkload) { w.ips, w.apiKey, w.globalKey = ips, api, global }
}

// clusterSlot: the store's slots are the cluster's, for the keys Redis
// documents and a store key.
func clusterSlot(t *testing.T, c *redistest.Cluster) {
	for _, key := range []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "sluice:{k}:fw:5:60000000"} {
		if got, want := redis.Slot(key), c.KeySlot(t, key); got != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

// clusterStacked runs the workloads of TestStackedExact on c, each
// request's parts on three masters, through Open (rueidis) and through
// go-redis ClusterClients: the store splits each decision by slot. No
// limit admits more than its count, and with a frozen clock (refunds are
// then exact) every key's state is its admitted count: refunds leave no
// residue. The requests denied although the model admits them
// (under-admission, while an earlier part's take awaits its refund) are
// counted and logged, the worst of all runs last.
func clusterStacked(t *testing.T, c *redistest.Cluster) {
	keys := clusterKeys(t, c)
	clients := []struct {
		name   string
		stores func(t *testing.T) []*redis.Store
	}{
		{"Open", func(t *testing.T) []*redis.Store {
			p := prefix()
			stores := make([]*redis.Store, replicas)
			for i := range stores {
				s, err := redis.Open(clusterURL(c), p)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				stores[i] = s
			}
			return stores
		}},
		{"go-redis", func(t *testing.T) []*redis.Store {
			p := prefix()
			stores := make([]*redis.Store, replicas)
			for i := range stores {
				stores[i] = goredis.New(clusterGoRedis(t, c), p)
			}
			return stores
		}},
	}
	var (
		mu    sync.Mutex
		worst struct {
			under, want int
			run         string
		}
	)
	report := func(t *testing.T, w stackWorkload, run stackRun) {
		want := w.want(goroutines * attempts)
		t.Logf("admitted %d, the model %d: %d under-admitted; per address %v", run.total, want, want-run.total, run.perReplica)
		if run.total > want {
			t.Errorf("admitted %d, more than the all-or-nothing model's %d", run.total, want)
		}
		mu.Lock()
		defer mu.Unlock()
		if want-run.total >= worst.under {
			worst.under, worst.want, worst.run = want-run.total, want, t.Name()
		}
	}
	frozen := storetest.NewClock()
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			for _, w := range stackWorkloads(keys) {
				t.Run(w.name+"/frozen clock", func(t *testing.T) {
					lims := limitersOver(cl.stores(t), same(sluice.WithClock(frozen.Now)))
					run := stackHammer(t, lims, w, atomically)
					report(t, w, run)
					for _, e := range append(w.overAdmitted(run), w.residue(t, lims[0], run)...) {
						t.Error(e)
					}
				})
			}
			// On the servers' clocks the refunds of token_bucket and gcra
			// may give back less than exact: only over-admission counts.
			for _, w := range stackWorkloads(keys)[len(sluice.Algorithms)+len(stackShapes):] {
				t.Run(w.name+"/server clock", func(t *testing.T) {
					lims := limitersOver(cl.stores(t), same())
					run := stackHammer(t, lims, w, atomically)
					report(t, w, run)
					for _, e := range w.overAdmitted(run) {
						t.Error(e)
					}
				})
			}
		})
	}
	t.Logf("worst under-admission: %d of the %d requests the model admits, in %s", worst.under, worst.want, worst.run)
}

// clusterSplitResults: a decision split over three masters and denied by
// its second part answers as one script would: the first part's state
// after the refund (nothing consumed), the denial, and the third part's
// state, read without consuming it. When the second part's script fails
// (its key holds a hash), the first part is refunded and Take returns the
// error; when the third part's state cannot be read, the denial stands.
func clusterSplitResults(t *testing.T, c *redistest.Cluster) {
	stores := map[string]*redis.Store{
		"rueidis":  redis.FromRueidis(clusterRueidis(t, c), prefix()),
		"go-redis": goredis.New(clusterGoRedis(t, c), prefix()),
	}
	first := sluice.PerDay(5).Using(sluice.FixedWindow)
	second := sluice.PerDay(1).Using(sluice.SlidingLog)
	third := sluice.PerDay(5).Using(sluice.GCRA)
	ctx := context.Background()
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			a := keysOn(t, c, name+"-a%d", c.Addrs[0], 1)[0]
			b := keysOn(t, c, name+"-b%d", c.Addrs[1], 2)
			d := keysOn(t, c, name+"-c%d", c.Addrs[2], 2)
			take := func(parts ...sluice.Part) ([]sluice.Result, error) {
				return s.Take(ctx, sluice.Request{Parts: parts})
			}
			one := func(key string, l sluice.Limit, cost int) sluice.Result {
				t.Helper()
				rs, err := take(sluice.Part{Key: key, Limits: []sluice.Limit{l}, Cost: cost})
				if err != nil {
					t.Fatal(err)
				}
				return rs[0]
			}
			untouched := func(when string) {
				t.Helper()
				if r := one(a, first, 0); r.Remaining != 5 {
					t.Errorf("%s: %s of %q has %d remaining, want 5: the refund left consumption", when, first, a, r.Remaining)
				}
			}
			one(b[0], second, 1) // spent
			one(d[0], third, 2)  // 3 remaining
			rs, err := take(
				sluice.Part{Key: a, Limits: []sluice.Limit{first}, Cost: 1},
				sluice.Part{Key: b[0], Limits: []sluice.Limit{second}, Cost: 1},
				sluice.Part{Key: d[0], Limits: []sluice.Limit{third}, Cost: 1},
			)
			if err != nil {
				t.Fatal(err)
			}
			want := []struct {
				allowed   bool
				remaining int
			}{{true, 5}, {false, 0}, {true, 3}}
			for i, r := range rs {
				if r.Allowed != want[i].allowed || r.Remaining != want[i].remaining {
					t.Errorf("part %d: %+v, want allowed %v with %d remaining", i, r, want[i].allowed, want[i].remaining)
				}
			}
			if rs[1].RetryAfter <= 0 {
				t.Errorf("the denial has RetryAfter %v", rs[1].RetryAfter)
			}
			untouched("after a denial")
			if r := one(d[0], third, 0); r.Remaining != 3 {
				t.Errorf("the third part has %d remaining after the denial, want 3: reading it consumed", r.Remaining)
			}

			// A key holding a hash: its script fails with WRONGTYPE.
			c.Do(t, c.Addrs[1], "HSET", s.Key(b[1], second), "f", "v")
			c.Do(t, c.Addrs[2], "HSET", s.Key(d[1], third), "f", "v")
			_, err = take(
				sluice.Part{Key: a, Limits: []sluice.Limit{first}, Cost: 1},
				sluice.Part{Key: b[1], Limits: []sluice.Limit{second}, Cost: 1},
			)
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("the second part's script failed: Take = %v, want its WRONGTYPE error", err)
			}
			untouched("after a failure")
			rs, err = take(
				sluice.Part{Key: a, Limits: []sluice.Limit{first}, Cost: 1},
				sluice.Part{Key: b[0], Limits: []sluice.Limit{second}, Cost: 1},
				sluice.Part{Key: d[1], Limits: []sluice.Limit{third}, Cost: 1},
			)
			if err != nil || rs[1].Allowed || rs[2] != (sluice.Result{Allowed: true, Limit: third.Capacity()}) {
				t.Errorf("denied, the third part unreadable: Take = %+v, %v; want the denial, the third part allowed with 0 remaining", rs, err)
			}
			untouched("after a denial with an unreadable part")
		})
	}
}
