//go:build integration

package policyfile_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policyfile"
	"github.com/sluice-go/sluice/store/memory"
)

// TestOpenBackend: OpenBackend builds the store of a redis section, in
// memory and on Redis, with no store wrapper, and decides and peeks.
func TestOpenBackend(t *testing.T) {
	srv := redistest.Start(t)
	for name, r := range map[string]config.Redis{
		"in-memory": {},
		"redis":     {URL: "redis://" + srv.Addr, OnError: "deny", Timeout: sluice.DefaultStoreTimeout},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := policyfile.OpenBackend(r, policyfile.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.Ready(context.Background()); err != nil {
				t.Errorf("Ready: %v", err)
			}
			for i, want := range []bool{true, false} {
				res, err := b.Limiter.Allow(context.Background(), "k", sluice.PerMinute(1))
				if err != nil || res.Allowed != want || res.Degraded != sluice.NotDegraded {
					t.Errorf("decision %d: allowed %v, degraded %q, %v; want %v by the store", i+1, res.Allowed, res.Degraded, err, want)
				}
			}
			// The store reads without deciding (sluice inspect).
			p, err := b.Limiter.Peek(context.Background(), sluice.Part{Key: "k", Limits: []sluice.Limit{sluice.PerMinute(1)}, Cost: 1})
			if err != nil || p.Allowed || p.Remaining != 0 {
				t.Errorf("Peek: %+v, %v; want denied, as the next decision", p.Result, err)
			}
		})
	}
}

// TestOpenBackendInvalid: a section that cannot work is an error, and
// the URL's password is not in it.
func TestOpenBackendInvalid(t *testing.T) {
	for name, r := range map[string]config.Redis{
		"on_error": {URL: "redis://127.0.0.1:1", OnError: "maybe"},
		"url":      {URL: "redis://:s3cret@[::1", OnError: "deny"},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := policyfile.OpenBackend(r, policyfile.WithLogger(slog.New(slog.DiscardHandler)))
			if err == nil {
				b.Close()
				t.Fatal("OpenBackend: nil error")
			}
			if s := err.Error(); strings.Contains(s, "s3cret") {
				t.Errorf("error %q quotes the password", s)
			}
		})
	}
}

// countTakes counts in takes the decisions that reach the store (its
// "take" calls, sluice.Hooks.StoreCall): Redis's, behind leases too.
func countTakes(takes *atomic.Int64) policyfile.Option {
	return policyfile.WithHooks(sluice.Hooks{StoreCall: func(op string, _ time.Duration, _ error) {
		if op == "take" {
			takes.Add(1)
		}
	}})
}

// TestStoreStateLog: the store's changes of state are logged once each,
// however many decisions fail: failing when Redis goes away and the
// breaker opens (the error policy decides meanwhile, without calling the
// store) and recovered when it is back. The hooks see the calls that
// reach the store.
func TestStoreStateLog(t *testing.T) {
	srv := redistest.Start(t)
	path := writeFile(t, "redis: {url: redis://"+srv.Addr+", on_error: allow}\n"+limitRules(100))
	log := &logs{}
	var takes atomic.Int64
	p := open(t, path, log, countTakes(&takes))
	run(t, p, []step{{"192.0.2.1", true, 99}})
	srv.Stop()
	// Decisions until the breaker opens (5 failures over 50ms), then 50
	// more.
	deadline := time.Now().Add(10 * time.Second)
	for p.Limiter().Breaker() == sluice.BreakerClosed && time.Now().Before(deadline) {
		if d := check(t, p, "r", "192.0.2.1"); !d.Allowed || d.Degraded != sluice.DegradedAllow {
			t.Errorf("decision with Redis down: allowed %v, degraded %q; want admitted by allow", d.Allowed, d.Degraded)
		}
		time.Sleep(time.Millisecond)
	}
	before := takes.Load()
	for range 50 {
		check(t, p, "r", "192.0.2.1")
	}
	if es := log.entries(t, "store failing"); len(es) != 1 || es[0]["level"] != "WARN" {
		t.Errorf("logged %v while Redis is down, want one warning", es)
	}
	if n := takes.Load() - before; n >= 50 {
		t.Errorf("%d calls reached the store during 50 decisions with the breaker open, want only its probes (one per 50ms)", n)
	}
	srv.Restart(t)
	waitFor(t, func() error {
		if d := check(t, p, "r", "192.0.2.1"); d.Degraded != sluice.NotDegraded {
			return fmt.Errorf("Redis is back, and decisions are still degraded %q", d.Degraded)
		}
		return nil
	})
	if es := log.entries(t, "store recovered"); len(es) != 1 {
		t.Errorf("logged %v after Redis came back, want one line", es)
	}
	if es := log.entries(t, "store failing"); len(es) != 1 {
		t.Errorf("logged %v in all, want one warning", es)
	}
}

// TestFleetShare: replicas on one Redis learn from their heartbeats how
// many they are, and while Redis is down each enforces its share of the
// limit under on_error local, so that the fleet admits the limit, not
// replicas × limit; a configured redis.replicas needs no heartbeat.
func TestFleetShare(t *testing.T) {
	srv := redistest.Start(t)
	rules := "rules:\n  - {name: r, key: ip, algorithm: fixed_window, limit: 10, period: 1h}\n"
	auto := writeFile(t, "redis: {url: redis://"+srv.Addr+", on_error: local}\n"+rules)
	logA, logB := &logs{}, &logs{}
	a, b := open(t, auto, logA), open(t, auto, logB)
	waitFor(t, func() error {
		for _, l := range []*logs{logA, logB} {
			es := l.entries(t, "replicas sharing the limits")
			if len(es) == 0 || es[len(es)-1]["replicas"] != float64(2) {
				return fmt.Errorf("replicas logged %v, want 2 last", es)
			}
		}
		return nil
	})
	fixed := open(t, writeFile(t, "redis: {url: redis://"+srv.Addr+", on_error: local, replicas: 5}\n"+rules), nil)
	srv.Stop()
	for _, tt := range []struct {
		name string
		ps   []*policyfile.Policy
		want int
	}{
		{"two replicas learnt", []*policyfile.Policy{a, b}, 10},
		{"one of five configured", []*policyfile.Policy{fixed}, 2},
	} {
		admitted := 0
		for _, p := range tt.ps {
			for range 20 {
				d := check(t, p, "r", "192.0.2.9")
				if d.Degraded != sluice.DegradedLocal {
					t.Fatalf("%s: decision with Redis down degraded %q, want local", tt.name, d.Degraded)
				}
				if d.Allowed {
					admitted++
				}
			}
		}
		if admitted != tt.want {
			t.Errorf("%s: the replicas admitted %d of a limit of 10 with Redis down, want %d", tt.name, admitted, tt.want)
		}
	}
}

// TestMemorySection: memory.max_keys bounds the in-memory store, the store
// itself or Redis's local fallback, which WithMemoryStore is handed.
func TestMemorySection(t *testing.T) {
	srv := redistest.Start(t)
	for name, redisSection := range map[string]string{
		"store":    "",
		"fallback": "redis: {url: redis://" + srv.Addr + ", on_error: local}\n",
	} {
		var got *memory.Store
		open(t, writeFile(t, redisSection+"memory: {max_keys: 1000}\n"+limitRules(5)), nil,
			policyfile.WithMemoryStore(func(s *memory.Store) { got = s }))
		if got == nil || got.Capacity() < 1000 || got.Capacity() > 1100 {
			t.Errorf("%s: WithMemoryStore got %v, want a store of about 1000 entries", name, got)
		}
	}
}

// TestDenyCacheSetting: on Redis, the redis section's deny_cache (true by
// default) answers a key hammered over its limit in process, and false
// sends every request to the store.
func TestDenyCacheSetting(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		on   bool
		most int64
	}{{true, 2}, {false, 50}} {
		t.Run(fmt.Sprint("deny_cache ", tc.on), func(t *testing.T) {
			var takes atomic.Int64
			r := config.DefaultRedis()
			r.URL, r.DenyCache = "redis://"+srv.Addr, tc.on
			b, err := policyfile.OpenBackend(r, policyfile.WithLogger(slog.New(slog.DiscardHandler)),
				countTakes(&takes))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			admitted := 0
			for range 50 {
				res, err := b.Limiter.Allow(context.Background(), fmt.Sprint("hammered-", tc.on), sluice.PerHour(1))
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					admitted++
				}
			}
			if admitted != 1 || takes.Load() > tc.most || !tc.on && takes.Load() != tc.most {
				t.Errorf("%d admitted, %d decided by the store; want 1 admitted and %d decisions at most (exactly, without the cache)", admitted, takes.Load(), tc.most)
			}
		})
	}
}

// TestOpenBackendWaitReplicas: redis.wait_replicas reaches the store: a
// decision is admitted while the replica acknowledges, and while it is
// stopped an admitted decision fails to the error policy (deny) and Ready
// fails; the control without it admits.
func TestOpenBackendWaitReplicas(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	ctx := context.Background()
	open := func(wait int) *policyfile.Backend {
		// Bounds a loaded machine keeps while the replica is up; with it
		// stopped, each admitted decision waits out the WAIT timeout.
		r := config.Redis{URL: "redis://" + primary.Addr, OnError: "deny", Timeout: 3 * time.Second, Replicas: 1}
		if wait > 0 {
			r.WaitReplicas, r.WaitTimeout = wait, time.Second
		}
		b, err := policyfile.OpenBackend(r, policyfile.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	waiting, plain := open(1), open(0)
	l := sluice.PerHour(100)
	for _, b := range []*policyfile.Backend{waiting, plain} {
		if res, err := b.Limiter.Allow(ctx, "k", l); err != nil || !res.Allowed || res.Degraded != sluice.NotDegraded {
			t.Fatalf("replicating: %+v, %v; want admitted by the store", res, err)
		}
	}
	if err := waiting.Ready(ctx); err != nil {
		t.Errorf("Ready, replicating: %v", err)
	}
	if err := syscall.Kill(replica.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(replica.Pid(), syscall.SIGCONT) }()
	if res, err := waiting.Limiter.Allow(ctx, "k", l); err != nil || res.Allowed || res.Degraded == sluice.NotDegraded {
		t.Errorf("replica stopped, wait_replicas 1: %+v, %v; want denied by the error policy", res, err)
	}
	if err := waiting.Ready(ctx); err == nil || !strings.Contains(err.Error(), "not acknowledged by enough replicas") {
		t.Errorf("Ready, replica stopped: %v; want not acknowledged", err)
	}
	if res, err := plain.Limiter.Allow(ctx, "k", l); err != nil || !res.Allowed || res.Degraded != sluice.NotDegraded {
		t.Errorf("replica stopped, no wait_replicas: %+v, %v; want admitted by the store", res, err)
	}
}

// TestLeaseSection: a rule's lease section puts the Redis store behind
// leases of its block, for that rule's limit only; Close gives the rests
// back; a reload that removes the section stops the leasing.
func TestLeaseSection(t *testing.T) {
	srv := redistest.Start(t)
	const rules = `
redis: {url: "redis://%s"}
rules:
  - {name: search, key: request, algorithm: fixed_window, limit: 1000, period: 1h%s}
  - {name: login, key: request, algorithm: fixed_window, limit: 1000, period: 1h}
`
	path := writeFile(t, fmt.Sprintf(rules, srv.Addr, ", lease: {block: 10}"))
	var counted atomic.Int64
	p := open(t, path, nil, countTakes(&counted))
	for range 3 {
		if d := check(t, p, "search", "k"); !d.Allowed {
			t.Fatal("search denied")
		}
		if d := check(t, p, "login", "k"); !d.Allowed {
			t.Fatal("login denied")
		}
	}
	if got := counted.Load(); got != 1+3 {
		t.Errorf("3 searches and 3 logins: %d takes reached Redis, want 1 block of search and 3 logins", got)
	}
	// What another replica sees in Redis: the block of 10 spent.
	other, err := policyfile.OpenBackend(config.Redis{URL: "redis://" + srv.Addr, OnError: "deny", Timeout: sluice.DefaultStoreTimeout}, policyfile.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	search := p.File().Rules[0].Limits[0]
	left := func() int {
		t.Helper()
		r, err := other.Limiter.Peek(context.Background(), sluice.Part{Key: "k:k", Limits: []sluice.Limit{search}, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return r.Remaining + 1 // Peek of cost 1 reports what is left after it
	}
	if got := left(); got != 990 {
		t.Errorf("search left in Redis: %d, want 990 (one block leased)", got)
	}
	rewrite(t, path, fmt.Sprintf(rules, srv.Addr, ""))
	if err := p.Reload(); err != nil {
		t.Fatal(err)
	}
	before := counted.Load()
	check(t, p, "search", "k")
	if got := counted.Load() - before; got != 1 {
		t.Errorf("a search after the reload removed the lease: %d takes, want 1", got)
	}
	p.Close()
	if got := left(); got != 1000-4 {
		t.Errorf("search left in Redis after Close: %d, want %d: the lease's rest of 7 given back", got, 1000-4)
	}
}
