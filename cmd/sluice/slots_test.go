//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// The fleet's load: clients × perClient goroutines, each holding a slot
// for 5 to 50 ms at a time, admits times, against a concurrency limit of
// slotLimit.
const (
	slotClients   = 8
	slotPerClient = 32
	slotLimit     = 20
	slotAdmits    = 3 // per goroutine
)

// slotter acquires and releases the slots of one key; worker says who
// asks (a client and goroutine), so that a slotter can spread them.
type slotter interface {
	acquire(ctx context.Context, worker int) (lease string, ok bool, err error)
	release(ctx context.Context, worker int, lease string) error
}

// span is an interval of the test's clock.
type span struct{ from, to time.Time }

// slotRun is what a run of the fleet's load saw.
type slotRun struct {
	maxInFlight int64
	holds       []span // per admission: from before its acquire was sent to after its release answered
	denials     []span // per denial: from before its acquire was sent to after its answer
}

// runSlots runs the fleet's load against s. A worker counts itself in
// flight from the moment its acquire answers to the moment before it
// sends its release, inside the time the store holds its slot, so that
// the number in flight never exceeds what the store holds.
func runSlots(t *testing.T, s slotter) *slotRun {
	t.Helper()
	ctx := context.Background()
	var (
		inFlight, peak atomic.Int64
		mu             sync.Mutex
		run            = &slotRun{}
		wg             sync.WaitGroup
		gate           = make(chan struct{})
	)
	for w := range slotClients * slotPerClient {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			<-gate
			for admitted, tries := 0, 0; admitted < slotAdmits && tries < 2000; tries++ {
				from := time.Now()
				lease, ok, err := s.acquire(ctx, w)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					mu.Lock()
					run.denials = append(run.denials, span{from, time.Now()})
					mu.Unlock()
					// A client backs off before it tries again (and 256
					// of them retrying at once must not starve the
					// machine the other tests run on).
					time.Sleep(time.Duration(5+rng.IntN(16)) * time.Millisecond)
					continue
				}
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Duration(5+rng.IntN(46)) * time.Millisecond)
				inFlight.Add(-1)
				if err := s.release(ctx, w, lease); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				run.holds = append(run.holds, span{from, time.Now()})
				mu.Unlock()
				admitted++
			}
		})
	}
	close(gate)
	wg.Wait()
	run.maxInFlight = peak.Load()
	return run
}

// unfounded returns the denials during which fewer than limit
// admissions could have held a slot at any instant. A store decides a
// denial at an instant within the denial's span, when limit slots are
// held, each by an admission whose span holds that instant: so a correct
// store has none.
func (r *slotRun) unfounded(limit int) int {
	type event struct {
		at    time.Time
		delta int
	}
	events := make([]event, 0, 2*len(r.holds))
	for _, h := range r.holds {
		events = append(events, event{h.from, 1}, event{h.to, -1})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return b.delta - a.delta // at one instant, starts before ends
	})
	// count[i] is the number of spans open just after events[i].
	count := make([]int, len(events))
	n := 0
	for i, e := range events {
		n += e.delta
		count[i] = n
	}
	bad := 0
	for _, d := range r.denials {
		// Spans are closed: at one instant, starts come before ends, so
		// the count after an instant's starts is what is open at it.
		i, _ := slices.BinarySearchFunc(events, d.from, func(e event, at time.Time) int {
			if e.at.Before(at) {
				return -1
			}
			return 1
		})
		most := 0
		if i > 0 {
			most = count[i-1] // open since before d.from
		}
		for ; i < len(events) && !events[i].at.After(d.to); i++ {
			most = max(most, count[i])
		}
		if most < limit {
			bad++
		}
	}
	return bad
}

// check fails t unless the run held at most limit slots at once, was
// full at some point (denials), was denied only while full, and admitted
// every worker its slotAdmits. How close the workers' own count comes to
// the limit depends on the round trips around each hold (under load, a
// slot is held for a while before and after its worker counts itself),
// so it is logged, not asserted.
func (r *slotRun) check(t *testing.T, limit int) {
	t.Helper()
	t.Logf("%d admitted, %d denied; at most %d in flight", len(r.holds), len(r.denials), r.maxInFlight)
	if r.maxInFlight > int64(limit) {
		t.Errorf("%d in flight at once, above the limit of %d", r.maxInFlight, limit)
	}
	if len(r.denials) == 0 {
		t.Errorf("no denial: the load never filled the limit, and the run shows nothing")
	}
	if want := slotClients * slotPerClient * slotAdmits; len(r.holds) != want {
		t.Errorf("%d admissions, want %d", len(r.holds), want)
	}
	if bad := r.unfounded(limit); bad > 0 {
		t.Errorf("%d of %d denials came while fewer than %d slots could be held", bad, len(r.denials), limit)
	}
}

// TestUnfounded is the control of slotRun.unfounded: a denial is founded
// only where as many holds as the limit overlap within its span.
func TestUnfounded(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	holds := []span{{at(0), at(10)}, {at(5), at(20)}, {at(15), at(30)}}
	for _, tc := range []struct {
		denial    span
		limit     int
		unfounded int
	}{
		{span{at(6), at(7)}, 2, 0},   // two held throughout
		{span{at(11), at(12)}, 2, 1}, // one held
		{span{at(11), at(16)}, 2, 0}, // the second comes in
		{span{at(1), at(4)}, 1, 0},
		{span{at(1), at(4)}, 2, 1},
		{span{at(0), at(30)}, 3, 1}, // never three at once
		{span{at(31), at(40)}, 1, 1},
		{span{at(10), at(10)}, 2, 0}, // the first ends as the denial comes: both held at 10
	} {
		r := &slotRun{holds: holds, denials: []span{tc.denial}}
		if got := r.unfounded(tc.limit); got != tc.unfounded {
			t.Errorf("denial %v-%v under %d: unfounded %d, want %d", tc.denial.from.UnixMilli(), tc.denial.to.UnixMilli(), tc.limit, got, tc.unfounded)
		}
	}
}

// serveSlotter acquires with /v1/check and releases with /v1/release on
// replicas of `sluice serve`: each client has its own connections, and a
// worker releases on another replica than the one it acquired on.
type serveSlotter struct {
	replicas []*daemon
	clients  []*http.Client
	key      string
}

func newServeSlotter(t *testing.T, replicas []*daemon, key string) *serveSlotter {
	s := &serveSlotter{replicas: replicas, key: key}
	for range slotClients {
		tr := &http.Transport{MaxIdleConnsPerHost: slotPerClient}
		t.Cleanup(tr.CloseIdleConnections)
		// A bound on a stuck request, not a performance assertion.
		s.clients = append(s.clients, &http.Client{Transport: tr, Timeout: time.Minute})
	}
	return s
}

func (s *serveSlotter) post(worker, replica int, path, body string) (int, []byte, error) {
	d := s.replicas[replica%len(s.replicas)]
	resp, err := s.clients[worker/slotPerClient].Post(d.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (s *serveSlotter) acquire(_ context.Context, worker int) (string, bool, error) {
	code, body, err := s.post(worker, worker, "/v1/check", fmt.Sprintf(`{"rule":"jobs","key":%q}`, s.key))
	switch {
	case err != nil:
		return "", false, err
	case code == http.StatusTooManyRequests:
		return "", false, nil
	case code != http.StatusOK:
		return "", false, fmt.Errorf("check: %d %s", code, body)
	}
	var got struct {
		Reservation string `json:"reservation"`
	}
	if err := json.Unmarshal(body, &got); err != nil || got.Reservation == "" {
		return "", false, fmt.Errorf("check: %s: no reservation (%v)", body, err)
	}
	return got.Reservation, true, nil
}

func (s *serveSlotter) release(_ context.Context, worker int, lease string) error {
	code, body, err := s.post(worker, worker+1, "/v1/release", fmt.Sprintf(`{"reservation":%q}`, lease))
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("release: %d %s", code, body)
	}
	return err
}

// racySlotter is the control: it counts slots in one Redis key with a
// read, then a write, in two commands, for acquire and for release, the
// mistake an atomic script prevents. The harness must catch it.
type racySlotter struct {
	c   rueidis.Client
	key string
}

func (s *racySlotter) count(ctx context.Context) (int64, error) {
	n, err := s.c.Do(ctx, s.c.B().Get().Key(s.key).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return n, err
}

func (s *racySlotter) set(ctx context.Context, n int64) error {
	return s.c.Do(ctx, s.c.B().Set().Key(s.key).Value(strconv.FormatInt(n, 10)).Build()).Error()
}

func (s *racySlotter) acquire(ctx context.Context, _ int) (string, bool, error) {
	n, err := s.count(ctx)
	if err != nil || n >= slotLimit {
		return "", false, err
	}
	return "x", true, s.set(ctx, n+1)
}

func (s *racySlotter) release(ctx context.Context, _ int, _ string) error {
	n, err := s.count(ctx)
	if err != nil {
		return err
	}
	return s.set(ctx, n-1)
}

// TestSlotsFleet is the concurrency limit's exactness over a fleet: three
// `sluice serve` replicas share one Redis (then a 3-master Cluster), and
// 8 clients of 32 goroutines each acquire a slot of one key, hold it for
// 5 to 50 ms and release it, on another replica. The number in flight,
// counted by the workers themselves, never exceeds the limit, and no
// denial comes while fewer than the limit could be held. The control,
// which counts with a read and then a write, fails the same check.
func TestSlotsFleet(t *testing.T) {
	cfg := writeFile(t, fmt.Sprintf(`
redis:
  timeout: 5s
  on_error: deny
rules:
  - {name: jobs, key: request, algorithm: concurrency, limit: %d, ttl: 30s}
`, slotLimit))
	fleet := func(t *testing.T, url string) []*daemon {
		var ds []*daemon
		for range 3 {
			ds = append(ds, startServe(t, nil, "--config", cfg, "--redis", url))
		}
		return ds
	}
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		runSlots(t, newServeSlotter(t, fleet(t, "redis://"+srv.Addr), "acct-1")).check(t, slotLimit)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		url := "redis://" + c.Addrs[0] + "?addr=" + c.Addrs[1] + "&addr=" + c.Addrs[2]
		runSlots(t, newServeSlotter(t, fleet(t, url), "acct-2")).check(t, slotLimit)
	})
	t.Run("racy control", func(t *testing.T) {
		srv := redistest.Start(t)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		run := runSlots(t, &racySlotter{c: c, key: "racy"})
		t.Logf("the control: %d admitted, %d denied; at most %d in flight", len(run.holds), len(run.denials), run.maxInFlight)
		if run.maxInFlight <= slotLimit {
			t.Errorf("the read-then-write control kept %d in flight at most, within the limit of %d: the harness cannot tell", run.maxInFlight, slotLimit)
		}
	})
}

// TestSlotsCrash: a `sluice proxy` replica holds every slot of a
// concurrency limit for requests its upstream has not answered, renewing
// their leases while they run, and is SIGKILLed. Its slots free
// themselves when their leases end, within a lease of the kill: the other
// replica denies until the first lease ends, and admits again by a lease
// and a second after the kill.
func TestSlotsCrash(t *testing.T) {
	const (
		limit = 4
		lease = 2 * time.Second
	)
	srv := redistest.Start(t)
	cfg := writeFile(t, fmt.Sprintf(`
redis:
  timeout: 5s
  on_error: deny
rules:
  - {name: slow, match: /slow, key: global, algorithm: concurrency, limit: %d, ttl: %s}
`, limit, lease))
	up := startHoldingUpstream(t)
	args := []string{"--config", cfg, "--upstream", up.URL, "--redis", "redis://" + srv.Addr}
	victim, other := startProxy(t, nil, args...), startProxy(t, nil, args...)

	for range limit {
		go func() {
			if resp, err := http.Get(victim.base + "/slow"); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitUntil(t, 10*time.Second, func() error {
		if n := up.running.Load(); n != limit {
			return fmt.Errorf("%d requests at the upstream, want %d", n, limit)
		}
		return nil
	})
	status := func() int {
		resp, err := http.Get(other.base + "/slow?probe")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := status(); code != http.StatusTooManyRequests {
		t.Fatalf("with every slot held: %d, want 429", code)
	}
	// Held past their first lease, the slots stay held: renewed.
	time.Sleep(lease + lease/2)
	if code := status(); code != http.StatusTooManyRequests {
		t.Fatalf("a lease and a half later: %d, want 429 (the holder renews its leases)", code)
	}

	if err := victim.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-victim.done
	killed := time.Now()
	// A renewal sent just before the kill may still reach Redis: read the
	// leases once it cannot.
	time.Sleep(100 * time.Millisecond)
	keys, _ := srv.Do(t, "KEYS", "*c:slow*").([]any)
	if len(keys) != 1 {
		t.Fatalf("KEYS *c:slow* = %v, want the limit's one key", keys)
	}
	leases, _ := srv.Do(t, "ZRANGE", fmt.Sprint(keys[0]), "0", "-1", "WITHSCORES").([]any)
	if len(leases) != 2*limit {
		t.Fatalf("ZRANGE = %v, want %d leases", leases, limit)
	}
	first, _ := strconv.ParseInt(fmt.Sprint(leases[1]), 10, 64)
	serverNow := func() int64 {
		tm, _ := srv.Do(t, "TIME").([]any)
		s, _ := strconv.ParseInt(fmt.Sprint(tm[0]), 10, 64)
		us, _ := strconv.ParseInt(fmt.Sprint(tm[1]), 10, 64)
		return s*1e6 + us
	}
	for {
		code := status()
		after := serverNow() // the decision came before it
		if code == http.StatusOK {
			if after < first {
				t.Fatalf("admitted at %dµs, before the first lease ended at %dµs", after, first)
			}
			t.Logf("admitted again %v after the kill, %v after the first lease ended", time.Since(killed).Round(time.Millisecond), time.Duration(after-first)*time.Microsecond)
			break
		}
		if code != http.StatusTooManyRequests {
			t.Fatalf("after the kill: %d, want 429 or 200", code)
		}
		if since := time.Since(killed); since > lease+time.Second {
			t.Fatalf("still denied %v after the kill, beyond the lease of %v and a second", since, lease)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSlotsHeldMetrics: a `sluice proxy` replica's /metrics counts, in
// sluice_slots_held{rule}, the slots it holds for the requests in flight
// to its upstream: each admitted request of a concurrency limit while the
// upstream has not answered it, not a denied one nor one of a rule
// without slots, back to zero once they are answered. The other replica,
// sharing the store, holds none, though it denies for the slots the
// first holds.
func TestSlotsHeldMetrics(t *testing.T) {
	const limit = 3
	srv := redistest.Start(t)
	cfg := writeFile(t, fmt.Sprintf(`
rules:
  - {name: slow, match: /slow, key: global, algorithm: concurrency, limit: %d, ttl: 30s}
  - {name: pages, match: /page, key: ip, limit: 100, period: 1m}
`, limit))
	up := startHoldingUpstream(t)
	args := []string{"--config", cfg, "--upstream", up.URL, "--redis", "redis://" + srv.Addr, "--metrics-listen", "127.0.0.1:0"}
	holder, other := startProxy(t, nil, args...), startProxy(t, nil, args...)
	var answered sync.WaitGroup
	t.Cleanup(func() { up.release(); answered.Wait() }) // before the replicas stop
	held := func(d *daemon, rule string) (int, error) {
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + servingAttrOf(t, d, "proxying", "metrics") + "/metrics")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		prefix := `sluice_slots_held{rule="` + rule + `"} `
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
				return strconv.Atoi(v)
			}
		}
		return 0, fmt.Errorf("no %s series in:\n%s", prefix, b)
	}
	wantHeld := func(d *daemon, rule string, want int) {
		t.Helper()
		waitUntil(t, 10*time.Second, func() error {
			if n, err := held(d, rule); err != nil || n != want {
				return fmt.Errorf("%s holds %d slots of %s (%v), want %d", d.base, n, rule, err, want)
			}
			return nil
		})
	}
	wantHeld(holder, "slow", 0) // from the first scrape

	codes := make(chan int, limit+2)
	get := func(d *daemon, path string) {
		answered.Go(func() {
			resp, err := http.Get(d.base + path)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	for range limit {
		get(holder, "/slow")
	}
	get(holder, "/page")
	waitUntil(t, 10*time.Second, func() error {
		if n := up.running.Load(); n != limit+1 {
			return fmt.Errorf("%d requests at the upstream, want %d", n, limit+1)
		}
		return nil
	})
	wantHeld(holder, "slow", limit)
	wantHeld(holder, "pages", 0)
	// Every slot is held: the other replica denies, and holds none.
	if resp, err := http.Get(other.base + "/slow"); err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the other replica with every slot held: %v %v, want 429", resp, err)
	} else {
		resp.Body.Close()
	}
	wantHeld(other, "slow", 0)
	wantHeld(holder, "slow", limit)

	up.release()
	answered.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a request held through the upstream: %d, want 200", code)
		}
	}
	wantHeld(holder, "slow", 0)
}

// holdingUpstream is an upstream that holds every request it gets until
// release (or the end of the test), counting those it holds; a request
// with a probe query parameter is answered at once.
type holdingUpstream struct {
	*httptest.Server
	running atomic.Int64
	release func() // idempotent
}

func startHoldingUpstream(t *testing.T) *holdingUpstream {
	t.Helper()
	u := &holdingUpstream{}
	hold := make(chan struct{})
	u.release = sync.OnceFunc(func() { close(hold) })
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("probe") {
			return
		}
		u.running.Add(1)
		defer u.running.Add(-1)
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(u.Close)
	t.Cleanup(u.release) // runs first: held requests end before Close waits for them
	return u
}
