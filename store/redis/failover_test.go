//go:build integration

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// The failover over-admission test (TestFailoverOverAdmission): keys,
// clients per key, and the limit of each key, which no key reaches before
// the failover.
const (
	failoverKeys    = 8
	failoverClients = 3
	failoverLimit   = 1000
	// failoverEach is how many admits (or, under WAIT, failures) every
	// key gets in a phase before the next.
	failoverEach = 30
)

// failoverLim never refills within the test: a window of ten years,
// aligned to the epoch (the next boundary is in 2029).
var failoverLim = sluice.Per(failoverLimit, sluice.MaxPeriod).Using(sluice.FixedWindow)

// The phases of the test, in order.
const (
	phaseReplicated = iota // the replica applies every write
	phaseStalled           // the replica is stopped, behind a replication stream it cannot take
	phaseAfter             // after the failover: the promoted replica, with a replica of its own again
	phases
)

// failoverTally counts each key's decisions by phase and outcome.
type failoverTally struct {
	mu                       sync.Mutex
	admitted, denied, failed [phases][failoverKeys]int
	notReplicated            int
	sampleErr                error
}

func (f *failoverTally) add(phase, key int, r sluice.Result, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case err != nil || r.Degraded != sluice.NotDegraded:
		f.failed[phase][key]++
		if errors.Is(err, redis.ErrNotReplicated) {
			f.notReplicated++
		}
		if f.sampleErr == nil {
			f.sampleErr = err
		}
	case r.Allowed:
		f.admitted[phase][key]++
	default:
		f.denied[phase][key]++
	}
}

// every reports whether count(phase, key) reaches n for every key.
func (f *failoverTally) every(n int, count func(f *failoverTally, key int) int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range failoverKeys {
		if count(f, k) < n {
			return false
		}
	}
	return true
}

// failoverGate lets the workers decide in a phase, or holds them; close
// returns once no decision is in flight.
type failoverGate struct {
	mu    sync.RWMutex
	phase int // -1: closed
}

func (g *failoverGate) open(phase int) { g.mu.Lock(); g.phase = phase; g.mu.Unlock() }
func (g *failoverGate) close()         { g.open(-1) }

// failoverPadding is how many bytes the test writes to the primary while
// its replica is stopped, so that the decisions after them stay in the
// primary's memory rather than in the kernel's socket buffers, which would
// deliver them to the replica after the primary's death: more than the
// largest TCP receive and send buffers together, and 16 MiB.
func failoverPadding(t *testing.T) int {
	t.Helper()
	total := 16 << 20
	for _, f := range []string{"/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_wmem"} {
		b, err := os.ReadFile(f)
		fields := strings.Fields(string(b))
		if err != nil || len(fields) != 3 {
			t.Fatalf("reading the TCP buffer sizes in %s: %v %q", f, err, b)
		}
		n, err := strconv.Atoi(fields[2])
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		total += n
	}
	return total
}

// TestFailoverOverAdmission measures the over-admission that a Sentinel
// failover causes, without and with WithWaitReplicas(1, ...): 8 keys of a
// limit of 1000, 3 clients on each. The replica first takes every write;
// then it is stopped (SIGSTOP) and the primary is sent more bytes than
// the kernel can buffer for it, so that the decisions after those are
// acknowledged by the primary and held in its memory; the primary is
// killed (SIGKILL) with decisions in flight and the replica let go on,
// which the sentinels promote; the old primary comes back as its replica;
// then the clients hammer every key until the store denies it. Over the
// whole window a key's admits beyond the limit are the over-admission:
// without WAIT, bounded by the admits the old primary acknowledged that
// the promoted replica lacks, and not zero (the control: the test can
// tell); with WAIT, zero, since every admit was on the only replica
// before its client heard it.
func TestFailoverOverAdmission(t *testing.T) {
	for _, wait := range []bool{false, true} {
		name := "async"
		if wait {
			name = "wait_replicas=1"
		}
		t.Run(name, func(t *testing.T) { failoverOverAdmission(t, wait) })
	}
}

func failoverOverAdmission(t *testing.T, wait bool) {
	s := redistest.StartSentinel(t)
	pfx := prefix()
	opts := []redis.Option{pfx}
	if wait {
		opts = append(opts, redis.WithWaitReplicas(1, waitTimeout))
	}
	store, err := redis.Open(s.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	lim := sluice.New(store, sluice.WithStoreTimeout(sentinelStoreTimeout))
	old, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	var replica string
	for _, a := range s.NodeAddrs() {
		if a != old {
			replica = a
		}
	}
	ctx := context.Background()
	key := func(k int) string { return "failover-" + strconv.Itoa(k) }
	count := func(addr string, k int) int {
		t.Helper()
		rs, err := redis.FromRueidis(newRueidis(t, addr), pfx).Peek(ctx, oneLimit(key(k), failoverLim, 0))
		if err != nil {
			t.Fatalf("reading %s on %s: %v", key(k), addr, err)
		}
		return failoverLimit - rs[0].Remaining
	}

	tally := &failoverTally{}
	gate := &failoverGate{phase: -1}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for k := range failoverKeys {
		for range failoverClients {
			wg.Go(func() {
				for !stop.Load() {
					gate.mu.RLock()
					p := gate.phase
					if p >= 0 {
						r, err := lim.Allow(ctx, key(k), failoverLim)
						tally.add(p, k, r, err)
					}
					gate.mu.RUnlock()
					if p < 0 {
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
	}
	defer func() { stop.Store(true); gate.close(); wg.Wait() }()
	until := func(what string, cond func(*failoverTally) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond(tally) {
			if time.Now().After(deadline) {
				tally.mu.Lock()
				defer tally.mu.Unlock()
				t.Fatalf("timed out waiting for %s: admitted %v, denied %v, failed %v (%v)", what, tally.admitted, tally.denied, tally.failed, tally.sampleErr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Replicated: then the replica has every write (a write and WAIT on
	// one connection: WAIT counts every write before it).
	gate.open(phaseReplicated)
	until("admits through the primary", func(f *failoverTally) bool {
		return f.every(failoverEach, func(f *failoverTally, k int) int { return f.admitted[phaseReplicated][k] })
	})
	gate.close()
	direct := newRueidis(t, old)
	marker := fmt.Sprintf("%s-synced", key(0))
	synced := direct.DoMulti(ctx, direct.B().Set().Key(marker).Value("1").Build(), direct.B().Wait().Numreplicas(1).Timeout(10000).Build())
	if n, err := synced[1].AsInt64(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica before the stall = %d, %v; want 1", n, err)
	}

	// Stalled: the replica stopped, the primary's stream to it held back
	// behind the padding.
	resume := pause(t, s.Node(t, replica))
	pad := failoverPadding(t)
	value := strings.Repeat("p", 1<<20)
	npad := (pad + len(value) - 1) / len(value)
	lastPad := fmt.Sprintf("%s-pad-%d", key(0), npad-1)
	for i := range npad {
		if err := direct.Do(ctx, direct.B().Set().Key(fmt.Sprintf("%s-pad-%d", key(0), i)).Value(value).Build()).Error(); err != nil {
			t.Fatalf("padding: %v", err)
		}
	}
	gate.open(phaseStalled)
	if wait {
		until("failures while the replica is stopped", func(f *failoverTally) bool {
			return f.every(failoverEach, func(f *failoverTally, k int) int { return f.failed[phaseStalled][k] })
		})
	} else {
		until("admits while the replica is stopped", func(f *failoverTally) bool {
			return f.every(failoverEach, func(f *failoverTally, k int) int { return f.admitted[phaseStalled][k] })
		})
	}
	s.KillPrimary(t) // decisions in flight
	resume()
	gate.close()

	promotedAddr := s.WaitFailover(t, old, 60*time.Second)
	promoted := make([]int, failoverKeys)
	for k := range promoted {
		promoted[k] = count(promotedAddr, k)
	}
	onPromoted := newRueidis(t, promotedAddr)
	if n, err := onPromoted.Do(ctx, onPromoted.B().Exists().Key(lastPad, marker).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("the promoted replica holds %d of the last padding key and the marker (%v); want the marker only: the stall did not hold back the replication stream (%d MiB of padding)", n, err, npad)
	}
	s.RestartReplica(t, old, promotedAddr)

	// After: every key hammered until the store denies it.
	gate.open(phaseAfter)
	until("a denial of every key by the promoted replica", func(f *failoverTally) bool {
		return f.every(1, func(f *failoverTally, k int) int { return f.denied[phaseAfter][k] })
	})
	gate.close()
	failoverCheck(t, wait, tally, promoted, func(k int) int { return count(promotedAddr, k) })
	_, decisions, largest := store.Coalesced()
	t.Logf("%d MiB of padding; %d decisions coalesced into batches (largest %d); %d failed with ErrNotReplicated; a failure: %v", npad, decisions, largest, tally.notReplicated, tally.sampleErr)
}

// failoverCheck checks and logs each key's count: promoted is what the
// promoted replica held of it, end its count at the end.
func failoverCheck(t *testing.T, wait bool, f *failoverTally, promoted []int, end func(k int) int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	const r, st, af = phaseReplicated, phaseStalled, phaseAfter
	t.Logf("per key (admits the store answered; lost: of those before the failover, missing on the promoted replica; over: admits beyond the limit of %d):", failoverLimit)
	var lostAll, overAll int
	for k := range failoverKeys {
		pre := f.admitted[r][k] + f.admitted[st][k]
		post := f.admitted[af][k]
		lost, over := pre-promoted[k], pre+post-failoverLimit
		lostAll += max(lost, 0)
		overAll += max(over, 0)
		t.Logf("  key %d: replicated %3d, stalled %3d (failed %3d), promoted holds %3d: lost %3d; after %4d (failed %d): over %3d",
			k, f.admitted[r][k], f.admitted[st][k], f.failed[st][k], promoted[k], lost, post, f.failed[af][k], over)
		if promoted[k] < f.admitted[r][k] {
			t.Errorf("key %d: the promoted replica holds %d, fewer than the %d admits made while it replicated", k, promoted[k], f.admitted[r][k])
		}
		if n := end(k); n != failoverLimit {
			t.Errorf("key %d: counts %d at the end, want the limit %d: it was denied", k, n, failoverLimit)
		}
		if post == 0 {
			t.Errorf("key %d: no admit after the failover", k)
		}
		// The theory: the promoted replica starts from what it had, and
		// admits up to the limit from there, less what failed decisions
		// consumed on it: lost - failed <= over <= lost.
		if over > lost || over < lost-f.failed[af][k] {
			t.Errorf("key %d: over-admission %d, want between the %d lost and %d less the %d failed after", k, over, lost, lost, f.failed[af][k])
		}
		if wait {
			if f.admitted[st][k] != 0 {
				t.Errorf("key %d: %d admits while the replica was stopped; want none under WAIT", k, f.admitted[st][k])
			}
			if promoted[k] < pre {
				t.Errorf("key %d: the promoted replica holds %d of the %d admits the store answered: WAIT lost some", k, promoted[k], pre)
			}
			if over > 0 {
				t.Errorf("key %d: over-admitted by %d under WAIT", k, over)
			}
		} else if promoted[k] > f.admitted[r][k]+f.failed[r][k] {
			t.Errorf("key %d: the promoted replica holds %d, more than the %d admits (and %d failures) made while it replicated: the stall let some through", k, promoted[k], f.admitted[r][k], f.failed[r][k])
		}
	}
	if wait && f.notReplicated == 0 {
		t.Error("no decision failed with ErrNotReplicated while the replica was stopped")
	}
	if !wait && (lostAll == 0 || overAll == 0) {
		t.Errorf("without WAIT, %d admits lost and %d over the limit; want some: the control shows no loss", lostAll, overAll)
	}
	t.Logf("total over %d keys: %d admits lost in the failover, %d admitted over the limit", failoverKeys, lostAll, overAll)
}
