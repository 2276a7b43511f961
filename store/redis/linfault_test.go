//go:build integration

package redis_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	goredislib "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/linear"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/internal/testing/toxitest"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/redis/goredis"
)

// The runs under network faults (package internal/testing/linear, "Faults"): 2
// replicas of 6 clients each, 8 rounds of 4 decisions, on the keys of
// every algorithm and a Ledger key, through a toxiproxy that loses
// replies in rounds 2 and 5. With 12 clients, each failing at most once
// a round, no key gets more than linear.MaxIndeterminate indeterminate
// decisions.
const (
	faultReplicas = 2
	faultClients  = 6
	faultRounds   = 8
	faultPer      = 4
)

// faultRoundsOn are the rounds of a fault run with a fault.
var faultRoundsOn = []int{2, 5}

// replyLosses are toxics that lose the next reply on every connection of
// the proxy (toxicity 1), added while the connections are open:
// toxiproxy applies a toxic to the connections open when it is added, and
// closes them with a FIN there, reset_peer too (it sets SO_LINGER 0, an
// RST, only on connections opened while it is on), so the client reads
// EOF; a connection opened while it is on loses the reply to its HELLO,
// so no script ever runs on it.
var replyLosses = []struct {
	name  string
	toxic toxitest.Toxic
}{
	// The reply is dropped and the connection closed at once.
	{"reset_peer", toxitest.Toxic{Type: "reset_peer", Attributes: map[string]any{"timeout": 0}}},
	// The reply is dropped and the connection closed 20 ms later.
	{"timeout", toxitest.Toxic{Type: "timeout", Attributes: map[string]any{"timeout": 20}}},
	// The reply is cut after 10 bytes (within its first integer) and the
	// connection closed.
	{"limit_data", toxitest.Toxic{Type: "limit_data", Attributes: map[string]any{"bytes": 10}}},
}

// faultClient names a way to build a store of a fault run over addr.
type faultClient struct {
	name  string
	store func(t *testing.T, addr string, opts ...redis.Option) *redis.Store
}

var (
	rueidisFaults = faultClient{"rueidis", func(t *testing.T, addr string, opts ...redis.Option) *redis.Store {
		return redis.FromRueidis(newRueidis(t, addr), opts...)
	}}
	goRedisFaults = faultClient{"go-redis", func(t *testing.T, addr string, opts ...redis.Option) *redis.Store {
		return goredis.New(newGoRedis(t, addr), opts...)
	}}
	// ringFaults is a go-redis Ring of one shard.
	ringFaults = faultClient{"go-redis Ring", func(t *testing.T, addr string, opts ...redis.Option) *redis.Store {
		r := goredislib.NewRing(&goredislib.RingOptions{Addrs: map[string]string{"one": addr}})
		t.Cleanup(func() { _ = r.Close() })
		return goredis.New(r, opts...)
	}}
	// resendingFaults is go-redis through resendingClient, over a
	// client with go-redis's default options (MaxRetries 3).
	resendingFaults = faultClient{"go-redis resending", func(t *testing.T, addr string, opts ...redis.Option) *redis.Store {
		return redis.New(resendingClient{newGoRedis(t, addr)}, opts...)
	}}
)

// replicas returns faultReplicas stores of fc over addr, sharing a fresh
// prefix.
func (fc faultClient) replicas(t *testing.T, addr string) []*redis.Store {
	pre := prefix()
	stores := make([]*redis.Store, faultReplicas)
	for i := range stores {
		stores[i] = fc.store(t, addr, pre)
	}
	return stores
}

// resendingClient is a redis.Client over go-redis's own EvalSha and
// Eval, as package goredis was before it refused go-redis's retries: what
// a Client of a few lines over go-redis does. go-redis sends a script
// again when its reply was lost.
type resendingClient struct{ c *goredislib.Client }

func (r resendingClient) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	v, err := r.c.EvalSha(ctx, sha, keys, stringArgs(args)...).Int64Slice()
	if err != nil && goredislib.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, fmt.Errorf("%w: %w", redis.ErrNoScript, err)
	}
	return v, err
}

func (r resendingClient) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	return r.c.Eval(ctx, script, keys, stringArgs(args)...).Int64Slice()
}

func stringArgs(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// watched is a store that reports its first failure of each fault on
// failed.
type watched struct {
	*redis.Store
	failed chan<- struct{}
}

func (w watched) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	rs, err := w.Store.Take(ctx, req)
	if err != nil {
		select {
		case w.failed <- struct{}{}:
		default:
		}
	}
	return rs, err
}

// blip is a fault that, in each of its rounds, puts a toxic on a proxy
// when the round begins and takes it off once a decision has failed (or
// after blipBound, so that a fault that fails nothing ends too): a lost
// reply, and then a network that works again, while the round goes on.
type blip struct {
	t      *testing.T
	tp     *toxitest.Server
	p      *toxitest.Proxy
	toxic  toxitest.Toxic
	rounds []int
	failed chan struct{}
	off    chan struct{} // closed when the current toxic is off; nil when none
}

// blipBound bounds how long a blip waits for a decision to fail.
const blipBound = 5 * time.Second

func newBlip(t *testing.T, tp *toxitest.Server, p *toxitest.Proxy, toxic toxitest.Toxic, rounds []int) *blip {
	toxic.Toxicity = 1
	return &blip{t: t, tp: tp, p: p, toxic: toxic, rounds: rounds, failed: make(chan struct{}, 1)}
}

// fault is the Run's Fault.
func (b *blip) fault(round int) {
	b.wait()
	if !slices.Contains(b.rounds, round) {
		return
	}
	select {
	case <-b.failed: // a failure of an earlier round
	default:
	}
	name := b.p.Add(b.t, b.toxic)
	off := make(chan struct{})
	b.off = off
	go func() {
		defer close(off)
		select {
		case <-b.failed:
		case <-time.After(blipBound):
		}
		// Here t may not fail the test (not its goroutine): the error
		// goes to the next round's wait.
		if err := b.remove(name); err != nil {
			b.t.Errorf("blip: %v", err)
		}
	}()
}

// wait waits until the current toxic, if any, is off.
func (b *blip) wait() {
	if b.off != nil {
		<-b.off
		b.off = nil
	}
}

// remove removes the toxic named name through the server's API.
func (b *blip) remove(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, b.tp.API+"/proxies/"+b.p.Name+"/toxics/"+name, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("remove toxic %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("remove toxic %s: %s", name, resp.Status)
	}
	return nil
}

// faultRun records a run over stores (behind proxy p of tp) with toxic
// on in faultRoundsOn, on Keys(prefix) and the Ledger key prefix+"ledger",
// and returns its history and the account of the ledger, read from the
// server srv. It fails t when no decision failed: such a run proves
// nothing about faults.
func faultRun(t *testing.T, srv *redistest.Server, tp *toxitest.Server, p *toxitest.Proxy, toxic toxitest.Toxic, stores []*redis.Store, prefix string, seed uint64) (linear.History, linear.Account) {
	t.Helper()
	b := newBlip(t, tp, p, toxic, faultRoundsOn)
	ss := make([]sluice.Store, len(stores))
	for i, s := range stores {
		ss[i] = watched{Store: s, failed: b.failed}
	}
	ledger := linear.Ledger(prefix + "ledger")
	r := linear.Run{Stores: ss, Clients: faultClients, Rounds: faultRounds, PerRound: faultPer, Keys: append(linear.Keys(prefix), ledger),
		Tick: linear.Tick, Seed: seed, Fault: b.fault}
	h := r.Record(t)
	b.wait()
	a, err := linear.Count(h, ledger.Name, ledgerUnits(t, srv, stores[0].Key(ledger.Name, linear.LedgerLimit)))
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	failed := 0
	for _, op := range h {
		if op.Output.(linear.Output).Err != "" {
			failed++
		}
	}
	if failed == 0 {
		t.Fatalf("%s: no decision of %d failed: the fault lost no reply", toxic.Type, len(h))
	}
	t.Logf("%s: %d decisions, %d failed; ledger: %v", toxic.Type, len(h), failed, a)
	return h, a
}

// ledgerUnits reads the log at key from srv: its entries by instant.
func ledgerUnits(t *testing.T, srv *redistest.Server, key string) map[int64]int {
	t.Helper()
	reply, ok := srv.Do(t, "ZRANGE", key, "0", "-1", "WITHSCORES").([]any)
	if !ok || len(reply)%2 != 0 {
		t.Fatalf("ZRANGE %s: %v", key, reply)
	}
	units := map[int64]int{}
	for i := 1; i < len(reply); i += 2 {
		score, err := strconv.ParseFloat(fmt.Sprint(reply[i]), 64)
		if err != nil {
			t.Fatalf("ZRANGE %s: score %v: %v", key, reply[i], err)
		}
		units[int64(score)]++
	}
	return units
}

// faultProxy starts a server and a toxiproxy in front of it, and returns
// both and the proxy.
func faultProxy(t *testing.T) (*redistest.Server, *toxitest.Server, *toxitest.Proxy) {
	t.Helper()
	tp := toxitest.Start(t)
	srv := redistest.Start(t)
	return srv, tp, tp.Proxy(t, "redis", srv.Addr)
}

// TestLinearizableFaults: through rueidis and through package goredis
// (a go-redis Client and a Ring, with their default options), decisions
// whose replies were lost (reset_peer, timeout, limit_data, in two
// rounds of eight) fail, and the history is linearizable with each
// failed decision applied once or never; the ledger shows no decision
// applied twice.
func TestLinearizableFaults(t *testing.T) {
	srv, tp, p := faultProxy(t)
	for _, fc := range []faultClient{rueidisFaults, goRedisFaults, ringFaults} {
		for _, loss := range replyLosses {
			t.Run(fc.name+"/"+loss.name, func(t *testing.T) {
				h, a := faultRun(t, srv, tp, p, loss.toxic, fc.replicas(t, p.Addr), "fault-", 1)
				if a.Extra != 0 || len(a.Answered) != 2 || a.Answered[0] != 0 || len(a.Failed) > 2 {
					t.Errorf("ledger: %v; want every decision applied once, or never if it failed", a)
				}
				linear.Require(t, h)
			})
		}
	}
}

// resendAttempts bounds the runs of TestLinearizableCatchesResend: each
// may or may not resend a script whose first sending ran, which the
// timing of the blip decides.
const resendAttempts = 10

// TestLinearizableCatchesResend is the control of TestLinearizableFaults,
// and the bug it found: go-redis, through a Client that lets it resend a
// script after its reply was lost (resendingClient, what package goredis
// did), applies some decisions twice under reset_peer. A run whose
// ledger proves it (more cost applied twice than the failed decisions
// never applied could stand for) must be Illegal, with its view written;
// a run that applied nothing twice must be Ok; at least one run of
// resendAttempts must prove it.
func TestLinearizableCatchesResend(t *testing.T) {
	srv, tp, p := faultProxy(t)
	t.Setenv(linear.ArtifactsEnv, t.TempDir())
	for attempt := range resendAttempts {
		pre := fmt.Sprintf("resend%d-", attempt)
		h, a := faultRun(t, srv, tp, p, replyLosses[0].toxic, resendingFaults.replicas(t, p.Addr), pre, uint64(attempt))
		ledger := linear.Check(t.Name(), h)
		v := ledger[slices.IndexFunc(ledger, func(v linear.Verdict) bool { return v.Key == pre+"ledger" })]
		t.Logf("attempt %d: ledger %v: porcupine says %s in %v", attempt, a, v.Result, v.Took)
		switch {
		case v.Result == porcupine.Unknown:
			t.Fatal(v.Err())
		case a.Extra == 0 && v.Result != porcupine.Ok:
			t.Fatalf("nothing applied twice, yet %v", v.Err())
		case !a.Provable():
			continue
		case v.Result != porcupine.Illegal:
			t.Fatalf("ledger %v proves a decision applied twice, yet porcupine finds the history linearizable", a)
		}
		if fi, err := os.Stat(v.View); err != nil || fi.Size() == 0 {
			t.Fatalf("visualization %s: %v", v.View, err)
		}
		t.Logf("the checker caught go-redis's resend; its visualization: %s", v.View)
		return
	}
	t.Fatalf("no run of %d proved a decision applied twice: go-redis never resent a script that had run", resendAttempts)
}
