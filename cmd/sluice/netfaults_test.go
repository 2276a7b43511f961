//go:build integration

package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/internal/testing/toxitest"
)

// The network-fault tests: `sluice serve` -> toxiproxy -> redis-server,
// a toxic added to the link under the fault tests' load (runFault, in
// faults_test.go) and removed, and one replica of three partitioned from
// Redis while the others are not. Each logs its "FAULT | ..." rows, as
// the process faults do, which RELIABILITY.md quotes:
//
//	export SLUICE_TOXIPROXY=$(make -s toxiproxy)
//	go test -race -count=1 -run TestNet -v ./cmd/sluice/ | grep 'FAULT |'
//
// A toxic applies to the replies (toxiproxy's downstream), so Redis runs
// every script it receives at once: a decision that fails may still have
// been taken, as under a hang.

// netBounds is what the network-fault tests assert beyond faultBounds.
var netBounds = struct {
	// hold is how long a toxic or the partition lasts.
	hold time.Duration
	// reconnects bounds the connections sluice opens to Redis while a
	// toxic holds: none but to replace a connection that failed, and
	// while every connection is reset, two per breaker probe at most
	// (and one per client of the load), never one per request (the load
	// sends thousands meanwhile).
	reconnects int
	// tries is how many fresh keys a check of exactness under a fault
	// may take to find one none of whose answers degraded (a decision
	// that waited the store deadline for a CPU, faultBounds.healthyDegraded).
	tries int
	// replicas is the number of `sluice serve` replicas of the partition.
	replicas int
}{
	hold:       netHold,
	reconnects: 2*int(netHold/sluice.DefaultBreakerProbe) + faultBounds.workers,
	tries:      5,
	replicas:   3,
}

// netHold is netBounds.hold.
const netHold = 2 * time.Second

// toxicRun is one toxic between sluice and Redis, under one policy.
type toxicRun struct {
	name   string // the subtest's
	fault  string // the summary row's
	policy string
	toxic  toxitest.Toxic
	// exact: the limit must be exact while the toxic holds, Redis still
	// deciding (the toxic slows or cuts replies, and no more).
	exact bool
	// f is the rest of the run: what must degrade, or not.
	f faultRun
}

// runToxic runs r: `sluice serve` reaches redis-server through a
// toxiproxy proxy, r.toxic is added at inject and removed at heal, which
// closes the connections of a timeout toxic (Cleanup). It logs how many
// connections sluice opened to Redis while the toxic held, and bounds
// them (netBounds.reconnects).
func runToxic(t *testing.T, r toxicRun) {
	t.Helper()
	srv := redistest.Start(t)
	tp := toxitest.Start(t)
	p := tp.Proxy(t, "redis", srv.Addr)
	f := r.f
	f.fault, f.policy, f.url, f.hold = r.fault, r.policy, "redis://"+p.Addr, netBounds.hold
	var name string
	var conns int
	f.inject = func(t *testing.T) {
		conns = connections(t, srv)
		name = p.Add(t, r.toxic)
	}
	if r.exact {
		f.during = func(t *testing.T, d *daemon) { exactUnder(t, d, r.fault) }
	}
	f.heal = func(t *testing.T) {
		p.Remove(t, name)
		n := connections(t, srv) - conns - 1 // the INFO's own
		t.Logf("%s: sluice opened %d connections to Redis while the toxic held", r.fault, n)
		if n > netBounds.reconnects {
			t.Errorf("%s: %d connections opened in %v, more than %d: a reconnection per request, not per probe", r.fault, n, netBounds.hold, netBounds.reconnects)
		}
	}
	runFault(t, f)
}

// connections returns how many connections srv has accepted
// (total_connections_received), each INFO's own included.
func connections(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "stats").(string)
	_, rest, _ := strings.Cut(info, "total_connections_received:")
	n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\r\n", 2)[0]))
	if err != nil {
		t.Fatalf("INFO stats: total_connections_received: %v", err)
	}
	return n
}

// exactUnder checks that rule exact admits exactly its limit of 3 x as
// many concurrent checks on d now, under a fault: on fresh keys until one
// has no degraded answer, up to netBounds.tries. Under latency the first
// try degrades whole: its decisions are the first to need scripts Redis
// has not run yet (sliding_log's, and a batch of it with the load's
// fixed_window), which costs two round trips (NOSCRIPT, then the
// source), over the deadline.
func exactUnder(t *testing.T, d *daemon, fault string) {
	t.Helper()
	n := faultBounds.exactLimit
	for try := 1; try <= netBounds.tries; try++ {
		admitted, denied, degraded, others := exactCheck(d, fmt.Sprintf("under-%d", try), n)
		if len(others) != 0 {
			t.Errorf("%s: checks of rule exact answered %q", fault, others)
			return
		}
		if degraded != 0 {
			continue
		}
		t.Logf("%s: under the fault, %d concurrent checks of a limit of %d: %d admitted, %d denied (try %d)", fault, 3*n, n, admitted, denied, try)
		if admitted != n || denied != 2*n {
			t.Errorf("%s: under the fault, %d concurrent checks of a limit of %d: %d admitted, %d denied; want exactly %d admitted", fault, 3*n, n, admitted, denied, n)
		}
		return
	}
	t.Errorf("%s: every one of %d checks of exactness under the fault had degraded answers", fault, netBounds.tries)
}

var (
	latency50  = toxitest.Toxic{Type: "latency", Attributes: map[string]any{"latency": 50}}
	latency300 = toxitest.Toxic{Type: "latency", Attributes: map[string]any{"latency": 300, "jitter": 100}}
	halfOpen   = toxitest.Toxic{Type: "timeout", Attributes: map[string]any{"timeout": 0}}
	resetPeer  = toxitest.Toxic{Type: "reset_peer", Attributes: map[string]any{"timeout": 0}}
	slowLink   = toxitest.Toxic{Type: "bandwidth", Attributes: map[string]any{"rate": 10}}
	sliced     = toxitest.Toxic{Type: "slicer", Attributes: map[string]any{"average_size": 8, "size_variation": 7, "delay": 0}}
)

// TestNetToxics: each toxic under the policies where it tells something.
//   - latency 50ms, under the 100ms store deadline: Redis still decides,
//     exactly, slower; nothing degrades.
//   - latency 300ms ± 100ms, over it: the breaker opens and the policy
//     answers (deny: 503), within the deadline.
//   - a half-open link (toxiproxy's timeout toxic of 0: the replies stop,
//     the connection stays open): as a hung Redis.
//   - every connection reset (TCP RST) as its first reply comes: the
//     policy answers, and sluice reconnects once per breaker probe.
//   - 10 KB/s: most decisions miss the deadline (a reply is about 50
//     bytes, a batch's a few KB) and degrade; none waits longer.
//   - replies cut into pieces of 1 to 15 bytes: exact, nothing degrades,
//     under deny, where a failure would be a 503.
func TestNetToxics(t *testing.T) {
	for _, r := range []toxicRun{
		{name: "latency50", fault: "latency 50ms", policy: "local", toxic: latency50, exact: true, f: faultRun{absorbed: true}},
		{name: "latency300", fault: "latency 300ms ± 100ms", policy: "local", toxic: latency300, f: faultRun{degrades: true, hung: true, silent: true}},
		{name: "latency300", fault: "latency 300ms ± 100ms", policy: "deny", toxic: latency300, f: faultRun{degrades: true, hung: true, silent: true}},
		{name: "halfopen", fault: "half-open (timeout 0)", policy: "local", toxic: halfOpen, f: faultRun{degrades: true, hung: true, silent: true}},
		{name: "halfopen", fault: "half-open (timeout 0)", policy: "deny", toxic: halfOpen, f: faultRun{degrades: true, hung: true, silent: true}},
		{name: "reset", fault: "reset_peer 0", policy: "local", toxic: resetPeer, f: faultRun{degrades: true}},
		{name: "bandwidth", fault: "bandwidth 10 KB/s", policy: "local", toxic: slowLink, f: faultRun{degrades: true, hung: true}},
		{name: "slicer", fault: "slicer 1-15 bytes", policy: "deny", toxic: sliced, exact: true, f: faultRun{absorbed: true}},
	} {
		t.Run(r.name+"/"+r.policy, func(t *testing.T) { runToxic(t, r) })
	}
}

// fleetCount is what the checks of one replica saw.
type fleetCount struct {
	admitted, denied         int // decided by Redis
	localAdmitted, localDeny int // by the error policy
	others                   []string
}

// fleetCheck sends each concurrent checks of rule exact for key to every
// replica of ds at once, and counts their answers per replica.
func fleetCheck(ds []*daemon, key string, each int) []fleetCount {
	counts := make([]fleetCount, len(ds))
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	body := fmt.Sprintf(`{"rule":"exact","key":%q}`, key)
	for i, d := range ds {
		for range each {
			wg.Go(func() {
				<-start
				code, b, err := postCheck(d, body)
				mu.Lock()
				defer mu.Unlock()
				c := &counts[i]
				degraded := bytes.Contains(b, []byte(`"degraded":true`))
				switch {
				case err != nil:
					c.others = append(c.others, err.Error())
				case code == 200 && degraded:
					c.localAdmitted++
				case code == 429 && degraded:
					c.localDeny++
				case code == 200:
					c.admitted++
				case code == 429:
					c.denied++
				default:
					c.others = append(c.others, fmt.Sprintf("%d %s", code, b))
				}
			})
		}
	}
	close(start)
	wg.Wait()
	return counts
}

// postCheck posts body to d's /v1/check and returns the status and body.
func postCheck(d *daemon, body string) (int, []byte, error) {
	resp, err := http.Post(d.base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (c fleetCount) String() string {
	return fmt.Sprintf("%d admitted + %d denied by Redis, %d + %d by the policy", c.admitted, c.denied, c.localAdmitted, c.localDeny)
}
