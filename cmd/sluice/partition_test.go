//go:build integration

package main

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/internal/testing/toxitest"
)

// TestNetPartition: netBounds.replicas `sluice serve` replicas (on_error
// local) on one redis-server, each through a toxiproxy proxy of its own,
// counting one another by their heartbeats; each under a share of the
// fault tests' load. The last replica's proxy is disabled for
// netBounds.hold (its connections closed, new ones refused): one replica
// partitioned from Redis while the others still reach it.
//
// The fleet-wide bound while one replica of N is cut off: for a limit L,
// Redis admits at most L for the replicas that reach it, and the cut one
// admits at most its share floor(L/N) on its own (it keeps the count of
// replicas its last heartbeat saw), so at most L + floor(L/N) per window,
// k x floor(L/N) for k replicas cut. Under the partition, checks of one
// key sent to every replica at once must find the replicas that reach
// Redis admitting exactly L between them, decided by Redis, and the cut
// one exactly its share, decided by its policy: a replica that fell back
// to the whole limit would admit L, over the bound. Once the partition
// heals, that key admits nothing more (its window holds L + floor(L/N)),
// the cut replica is decided by Redis again within faultBounds.recovery,
// and a fresh key admits exactly L over the fleet.
func TestNetPartition(t *testing.T) {
	b, n := faultBounds, netBounds.replicas
	limit := b.exactLimit
	share := limit / n
	srv := redistest.Start(t)
	tp := toxitest.Start(t)
	cfg := writeFile(t, fmt.Sprintf(faultPolicyFile, "local", limit))
	ds := make([]*daemon, n)
	ps := make([]*toxitest.Proxy, n)
	for i := range n {
		ps[i] = tp.Proxy(t, fmt.Sprintf("redis-%d", i+1), srv.Addr)
		ds[i] = startServe(t, []string{"SLUICE_REDIS_URL=redis://" + ps[i].Addr}, "--config", cfg)
	}
	for i, d := range ds {
		waitDecided(t, d)
		waitUntil(t, 10*time.Second, func() error { // a heartbeat a second
			if v := d.logValues("replicas sharing the limits", "replicas"); len(v) == 0 || v[len(v)-1] != strconv.Itoa(n) {
				return fmt.Errorf("replica %d counts the replicas %v, want %d", i+1, v, n)
			}
			return nil
		})
	}
	loads := make([]*faultLoad, n)
	for i, d := range ds {
		loads[i] = startLoad(d, b.workers/n)
		defer loads[i].stop()
	}
	time.Sleep(b.steady)
	injectAt, healAt := make([]time.Duration, n), make([]time.Duration, n)
	for i, l := range loads {
		injectAt[i] = l.now()
	}
	ps[n-1].Disable(t)
	under, try := partitionCheck(t, ds, limit, share)
	time.Sleep(netBounds.hold)
	ps[n-1].Enable(t)
	for i, l := range loads {
		healAt[i] = l.markHealed()
	}
	cut := loads[n-1]
	waitUntil(t, b.recovery+b.answer+b.settle, func() error {
		if !cut.healed.Load() {
			return fmt.Errorf("replica %d: no decision that is not degraded since the partition healed", n)
		}
		if since := cut.now() - healAt[n-1]; since < b.settle {
			return fmt.Errorf("%v since the partition healed, want %v", since, b.settle)
		}
		return nil
	})
	for _, l := range loads {
		l.stop()
	}

	// The window of the key checked under the partition holds: nothing
	// more is admitted, by Redis, on any replica.
	again := fleetCheck(ds, fmt.Sprintf("part-%d", try), limit)
	var exact []fleetCount
	var tries int
	for tries = 1; tries <= netBounds.tries; tries++ {
		if exact = fleetCheck(ds, fmt.Sprintf("healed-%d", tries), limit); fleetDegraded(exact) == 0 {
			break
		}
	}
	fault := fmt.Sprintf("partition: replica %d of %d cut from Redis (its proxy disabled) %v", n, n, netBounds.hold)
	for i, l := range loads {
		evs := l.all()
		pre, during, post := stats(evs, "before", injectAt[i], healAt[i]), stats(evs, "during", injectAt[i], healAt[i]), stats(evs, "after", injectAt[i], healAt[i])
		first, ok, lastDegraded := recovery(evs, healAt[i])
		role := "reaches Redis"
		if i == n-1 {
			role = "cut"
		}
		t.Logf("FAULT | %s | on_error local | replica %d (%s) | before: %s | during (%s): %s | after: %s | recovery %s (last degraded %s)",
			fault, i+1, role, pre, round(healAt[i]-injectAt[i]), during, post, round(first), round(lastDegraded))
		phases := map[string]phaseStats{"before": pre, "during": during, "after": post}
		checkAnswers(t, fmt.Sprintf("replica %d", i+1), "local", phases)
		healthy := func(p phaseStats) int { return int(b.healthyDegraded * float64(p.n)) }
		switch {
		case i < n-1 && (during.degraded > healthy(during) || post.degraded > healthy(post)):
			t.Errorf("replica %d, which reaches Redis: %d degraded decisions under the partition and %d after, want at most %d and %d", i+1, during.degraded, post.degraded, healthy(during), healthy(post))
		case i == n-1 && during.degraded == 0:
			t.Errorf("replica %d, cut: no degraded decision under the partition; the test did not cut it off: %s", i+1, during)
		case i == n-1 && (!ok || first > b.recovery):
			t.Errorf("replica %d: first decision not degraded %v after the partition healed (found %v), want within %v", i+1, first, ok, b.recovery)
		}
		if pre.degraded > healthy(pre) {
			t.Errorf("replica %d before the partition: %d degraded decisions, want at most %d: %s", i+1, pre.degraded, healthy(pre), pre)
		}
	}
	t.Logf("FAULT | %s | on_error local | the fleet | under the partition, %d checks of one key of a limit of %d on each replica at once: %s (try %d); bound %d + %d | after it healed, that key: %s | a fresh key, %d checks on each: %s (try %d)",
		fault, 2*limit, limit, fleetSummary(under), try, limit, share, fleetSummary(again), limit, fleetSummary(exact), tries)
	for i, c := range again {
		if c.admitted != 0 || len(c.others) != 0 {
			t.Errorf("after the partition healed, %d checks on every replica of the key checked under it: replica %d: %s, others %q; want none admitted by Redis (the window holds %d + %d)", limit, i+1, c, c.others, limit, share)
		}
	}
	if fleetDegraded(exact) != 0 || fleetAdmitted(exact) != limit {
		t.Errorf("after the partition healed, %d checks on every replica of a fresh key of a limit of %d: %s; want exactly %d admitted, by Redis", limit, limit, fleetSummary(exact), limit)
	}
}

// partitionCheck checks the fleet ds while its last replica is cut from
// Redis, on fresh keys until one whose answers on the replicas that reach
// Redis did not degrade (netBounds.tries), asserting the bound on every
// try and exactness on that one. It returns that try's counts and number.
func partitionCheck(t *testing.T, ds []*daemon, limit, share int) ([]fleetCount, int) {
	t.Helper()
	n := len(ds)
	var counts []fleetCount
	for try := 1; try <= netBounds.tries; try++ {
		counts = fleetCheck(ds, fmt.Sprintf("part-%d", try), 2*limit)
		cutOff := 0 // replicas that answered by their policy
		for _, c := range counts {
			if c.localAdmitted+c.localDeny > 0 {
				cutOff++
			}
			if len(c.others) != 0 {
				t.Errorf("under the partition, checks of rule exact answered %q", c.others)
			}
		}
		if got, bound := fleetAdmitted(counts), limit+cutOff*share; got > bound {
			t.Errorf("under the partition, the fleet admitted %d of a limit of %d, over the bound %d + %d x %d: %s", got, limit, limit, cutOff, share, fleetSummary(counts))
		}
		if fleetDegraded(counts[:n-1]) != 0 {
			continue
		}
		c := counts[n-1]
		if c.admitted+c.denied != 0 || c.localAdmitted != share {
			t.Errorf("under the partition, the cut replica: %s; want its share %d admitted by its policy, none by Redis", c, share)
		}
		if got := fleetAdmitted(counts[:n-1]); got != limit {
			t.Errorf("under the partition, the replicas that reach Redis admitted %d between them, want exactly the limit %d: %s", got, limit, fleetSummary(counts))
		}
		return counts, try
	}
	t.Errorf("under the partition, every one of %d checks had degraded answers on the replicas that reach Redis: %s", netBounds.tries, fleetSummary(counts))
	return counts, netBounds.tries
}

// fleetAdmitted and fleetDegraded sum the admitted and the degraded
// answers of counts.
func fleetAdmitted(counts []fleetCount) int {
	n := 0
	for _, c := range counts {
		n += c.admitted + c.localAdmitted
	}
	return n
}

func fleetDegraded(counts []fleetCount) int {
	n := 0
	for _, c := range counts {
		n += c.localAdmitted + c.localDeny
	}
	return n
}

// fleetSummary shows counts replica by replica, and the total admitted.
func fleetSummary(counts []fleetCount) string {
	s := ""
	for i, c := range counts {
		s += fmt.Sprintf("replica %d: %s; ", i+1, c)
	}
	return s + fmt.Sprintf("%d admitted in all", fleetAdmitted(counts))
}
