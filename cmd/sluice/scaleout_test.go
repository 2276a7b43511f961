//go:build integration

package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/nginxtest"
	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// TestScaleOut runs three `sluice proxy` replicas behind a real nginx that
// balances round robin, and floods one rule per algorithm through it from
// concurrent clients. Sharing one Redis, the replicas admit the limit
// exactly, in all, whichever replica each request reaches; each with its
// own in-memory store, they admit the limit each: three times the limit.
//
// Every replica receives requests/replicas requests of each rule (nginx
// runs one process, so its rotation is exact, and it never passes a
// request on to a second replica), which is at least the limit: in memory
// each replica fills its own limit, so that total is exact too.
func TestScaleOut(t *testing.T) {
	const (
		replicas = 3
		limit    = 60
		requests = 6 * limit // so that each replica sees 2 × limit
		clients  = 16
	)
	period := midWindowPeriod(t, time.Now())
	var cfg strings.Builder
	// A generous store timeout, and (for the Redis replicas) on_error deny
	// below: on a loaded machine a slow Redis call must show up as a 503,
	// not as a decision of the local fallback store that over-admits.
	cfg.WriteString("redis:\n  timeout: 5s\nrules:\n")
	for _, a := range sluice.Algorithms {
		fmt.Fprintf(&cfg, "  - {name: %[1]s, match: GET /%[1]s, key: global, algorithm: %[1]s, limit: %[2]d, period: %[3]s}\n", a, limit, period)
	}
	policy := writeFile(t, cfg.String())
	up := startUpstream(t)
	srv := redistest.Start(t)
	shared := startFarm(t, replicas, "--config", policy, "--upstream", up.URL, "--redis", "redis://"+srv.Addr, "--on-error", "deny")
	local := startFarm(t, replicas, "--config", policy, "--upstream", up.URL)

	// The algorithms run one after another: each rule's requests then
	// rotate over the replicas on their own, requests/replicas each.
	for _, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			path := "/" + string(a)

			hits := up.hits.Load()
			s := shared.flood(t, path, requests, clients)
			if s.admitted() != limit || s.denied != requests-limit {
				t.Errorf("Redis: %d admitted and %d denied of %d, want %d and %d (per replica: %s)",
					s.admitted(), s.denied, requests, limit, requests-limit, s.perReplica())
			}
			if got := up.hits.Load() - hits; got != limit {
				t.Errorf("Redis: the upstream saw %d requests, want %d", got, limit)
			}

			hits = up.hits.Load()
			m := local.flood(t, path, requests, clients)
			for i, n := range m.sent {
				if n < limit {
					t.Fatalf("nginx sent replica %d only %d requests, fewer than the limit %d: the in-memory total cannot be %d × %d (sent per replica: %v)",
						i+1, n, limit, replicas, limit, m.sent)
				}
			}
			for i, n := range m.ok {
				if n != limit {
					t.Errorf("memory: replica %d admitted %d of its %d requests, want its own limit %d", i+1, n, m.sent[i], limit)
				}
			}
			if m.admitted() != replicas*limit || m.denied != requests-replicas*limit {
				t.Errorf("memory: %d admitted and %d denied of %d, want %d and %d",
					m.admitted(), m.denied, requests, replicas*limit, requests-replicas*limit)
			}
			if got := up.hits.Load() - hits; got != int64(replicas*limit) {
				t.Errorf("memory: the upstream saw %d requests, want %d", got, replicas*limit)
			}

			t.Logf("%s: redis admitted %d of %d (limit %d; per replica %s); memory admitted %d (%d replicas × %d; per replica %s)",
				a, s.admitted(), requests, limit, s.perReplica(), m.admitted(), replicas, limit, m.perReplica())
		})
	}
}

// midWindowPeriod returns a period of a day or a little more in whose
// Unix-epoch-aligned window now lies in the middle half, so that no window
// boundary passes while the test runs: across one, fixed_window would
// admit up to 2 × limit, and sliding_window a little more than the limit.
// At a limit of 60 the buckets regain a token every 24 minutes or so:
// none refills during the test either.
func midWindowPeriod(t *testing.T, now time.Time) time.Duration {
	t.Helper()
	us := now.UnixMicro()
	for p := 24 * time.Hour; p < 48*time.Hour; p += time.Minute {
		pu := p.Microseconds()
		if off := us % pu; off >= pu/4 && off < 3*pu/4 {
			return p
		}
	}
	t.Fatalf("no period between 24h and 48h puts %v in the middle of its window", now)
	return 0
}

// farm is replicas of `sluice proxy` behind one nginx.
type farm struct {
	lb       *nginxtest.Server
	replicas []string // host:port of each, as nginx names them
	client   *http.Client
}

// startFarm starts n proxies with args, and nginx in front of them.
func startFarm(t *testing.T, n int, args ...string) *farm {
	t.Helper()
	f := &farm{}
	for range n {
		d := startProxy(t, nil, args...)
		f.replicas = append(f.replicas, strings.TrimPrefix(d.base, "http://"))
	}
	f.lb = nginxtest.Start(t, f.replicas)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	// A bound on a stuck request, not a performance assertion.
	f.client = &http.Client{Transport: tr, Timeout: time.Minute}
	return f
}

// tally counts a flood's answers: the 200s and the requests per replica
// (in the farm's order), and the 429s.
type tally struct {
	sent, ok []int
	denied   int
}

func (c *tally) admitted() int {
	n := 0
	for _, k := range c.ok {
		n += k
	}
	return n
}

// perReplica says how many each replica admitted, of how many: "20/120 19/120 21/120".
func (c *tally) perReplica() string {
	s := make([]string, len(c.ok))
	for i := range c.ok {
		s[i] = fmt.Sprintf("%d/%d", c.ok[i], c.sent[i])
	}
	return strings.Join(s, " ")
}

// flood sends requests GETs of path through nginx from clients goroutines
// and counts the answers. Any answer but a 200 or a 429 from exactly one
// of the replicas fails t.
func (f *farm) flood(t *testing.T, path string, requests, clients int) *tally {
	t.Helper()
	c := &tally{sent: make([]int, len(f.replicas)), ok: make([]int, len(f.replicas))}
	var (
		mu   sync.Mutex
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(requests) {
				resp, err := f.client.Get(f.lb.URL + path)
				if err != nil {
					t.Errorf("GET %s: %v", path, err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				from := resp.Header.Get(nginxtest.UpstreamHeader)
				i := slices.Index(f.replicas, from)
				mu.Lock()
				switch {
				case i < 0:
					// Several addresses would mean nginx retried the
					// request on another replica: counted twice.
					t.Errorf("GET %s: %d from %q, which is not one replica of %v: %.200s", path, resp.StatusCode, from, f.replicas, body)
				case resp.StatusCode == http.StatusOK:
					c.sent[i]++
					c.ok[i]++
				case resp.StatusCode == http.StatusTooManyRequests:
					c.sent[i]++
					c.denied++
				default:
					c.sent[i]++
					t.Errorf("GET %s: %d from replica %d, want 200 or 429: %.200s", path, resp.StatusCode, i+1, body)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return c
}
