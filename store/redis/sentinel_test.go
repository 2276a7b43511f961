//go:build integration

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/storetest"
)

// sentinelOpen opens the store through the sentinels of s, closed when t
// ends.
func sentinelOpen(t *testing.T, s *redistest.Sentinel) *redis.Store {
	t.Helper()
	store, err := redis.Open(s.URL(), prefix())
	if err != nil {
		t.Fatalf("Open(%s): %v", s.URL(), err)
	}
	t.Cleanup(store.Close)
	return store
}

// TestSentinelStore: the store opened through Sentinel decides exactly,
// keeps its state on the primary, and passes the conformance suite.
func TestSentinelStore(t *testing.T) {
	s := redistest.StartSentinel(t)
	store := sentinelOpen(t, s)
	primary, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	direct := newRueidis(t, primary)
	ctx := context.Background()
	// A frozen clock: on the server's, a day window ending between two
	// requests (a run across midnight UTC) would free the limit.
	lim := sluice.New(store, sluice.WithClock(storetest.NewClock().Now))
	for _, a := range sluice.Algorithms {
		l := sluice.PerDay(5).Using(a)
		for i := range 5 {
			r, err := lim.Allow(ctx, "exact", l)
			if err != nil || !r.Allowed || r.Degraded != sluice.NotDegraded || r.Remaining != 4-i {
				t.Fatalf("%s: request %d = %+v, %v; want admitted with %d remaining", l, i, r, err, 4-i)
			}
		}
		r, err := lim.Allow(ctx, "exact", l)
		if err != nil || r.Allowed || r.Degraded != sluice.NotDegraded || r.RetryAfter <= 0 {
			t.Errorf("%s: request 5 = %+v, %v; want denied with a RetryAfter", l, r, err)
		}
		n, err := direct.Do(ctx, direct.B().Exists().Key(store.Key("exact", l)).Build()).AsInt64()
		if err != nil || n != 1 {
			t.Errorf("%s: the state is not on the primary %s: EXISTS = %d, %v", l, primary, n, err)
		}
	}

	t.Run("conformance", func(t *testing.T) {
		opt, err := rueidis.ParseURL(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		c := rueidisWith(t, opt)
		if c.Mode() != rueidis.ClientModeSentinel {
			t.Fatalf("client mode %v, want sentinel", c.Mode())
		}
		storetest.Run(t, func(t *testing.T, _ func() time.Time) sluice.Store {
			return redis.FromRueidis(c, prefix())
		})
	})
}

// sentinelCapacity is the capacity of sentinelLimit, a limit that never
// runs out within the failover test and does not refill measurably (one
// token per 5 minutes): Remaining counts the admits.
const sentinelCapacity = 1_000_000

var sentinelLimit = sluice.Per(sentinelCapacity, sluice.MaxPeriod)

// sentinelStoreTimeout bounds every decision of the failover test: while
// the primary is gone, each decision waits this long before its policy
// answers.
const sentinelStoreTimeout = 200 * time.Millisecond

// sentinelDecision is one decision of the failover test.
type sentinelDecision struct {
	start, end time.Time
	r          sluice.Result
	err        error
}

// ok reports whether the store decided (no error, not degraded).
func (d sentinelDecision) ok() bool { return d.err == nil && d.r.Degraded == sluice.NotDegraded }

// sentinelWorker decides one client key under one policy in a loop,
// every 15ms; a hot worker decides again as soon as the store answers.
type sentinelWorker struct {
	policy string
	key    string
	lim    *sluice.Limiter
	hot    bool

	mu  sync.Mutex
	log []sentinelDecision
}

func (w *sentinelWorker) run(stop <-chan struct{}, limit sluice.Limit) {
	for {
		d := sentinelDecision{start: time.Now()}
		// Not the stop channel's context: stopping must not cancel a
		// decision, which would be an error under every policy.
		d.r, d.err = w.lim.Allow(context.Background(), w.key, limit)
		d.end = time.Now()
		w.mu.Lock()
		w.log = append(w.log, d)
		w.mu.Unlock()
		pause := 15 * time.Millisecond
		if w.hot && d.ok() {
			pause = 0
		}
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
	}
}

// decisions returns a copy of the worker's log.
func (w *sentinelWorker) decisions() []sentinelDecision {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]sentinelDecision(nil), w.log...)
}

// sentinelCount counts the decisions of log for which keep is true.
func sentinelCount(log []sentinelDecision, keep func(sentinelDecision) bool) int {
	n := 0
	for _, d := range log {
		if keep(d) {
			n++
		}
	}
	return n
}

// sentinelWait polls until cond holds for every worker, and reports
// whether it did before deadline.
func sentinelWait(workers []*sentinelWorker, deadline time.Time, cond func([]sentinelDecision) bool) bool {
	for {
		all := true
		for _, w := range workers {
			all = all && cond(w.decisions())
		}
		if all {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSentinelFailover kills the primary while limiters under every error
// policy decide in a loop through Sentinel, and checks that each policy
// answers the outage as documented, that decisions resume on the promoted
// replica, and what the limit's count went through. The outage's length
// is measured and logged, not asserted: it depends on the machine's load.
func TestSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	store := sentinelOpen(t, s)
	limit := sentinelLimit
	fallback := memory.New()
	policies := []sluice.ErrorPolicy{sluice.ReturnErrors, sluice.AllowOnError, sluice.DenyOnError, sluice.LocalOnError(fallback)}
	var workers []*sentinelWorker
	for _, p := range policies {
		lim := sluice.New(store, sluice.WithErrorPolicy(p), sluice.WithStoreTimeout(sentinelStoreTimeout))
		for i := range 3 {
			workers = append(workers, &sentinelWorker{policy: p.String(), key: fmt.Sprintf("%s-%d", p, i), lim: lim})
		}
	}
	// Four workers write one hot key as fast as the store answers, so
	// that writes are in flight when the primary dies: those are the ones
	// asynchronous replication may lose.
	hot := sluice.New(store, sluice.WithStoreTimeout(sentinelStoreTimeout))
	for range 4 {
		workers = append(workers, &sentinelWorker{policy: "return", key: "hot", lim: hot, hot: true})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.run(stop, limit) })
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()

	// Steady state first: every worker decided through the primary.
	const resume = 60 * time.Second
	if !sentinelWait(workers, time.Now().Add(resume), func(log []sentinelDecision) bool {
		return sentinelCount(log, sentinelDecision.ok) >= 5
	}) {
		t.Fatal("the limiters did not decide 5 times each through the primary")
	}
	kill := time.Now()
	old := s.KillPrimary(t)
	killed := time.Now() // the old primary's process has exited
	promotedAddr := s.WaitFailover(t, old, resume)
	promoted := time.Now()
	recovered := func(log []sentinelDecision) int {
		return sentinelCount(log, func(d sentinelDecision) bool { return d.ok() && !d.start.Before(killed) })
	}
	if !sentinelWait(workers, kill.Add(resume), func(log []sentinelDecision) bool { return recovered(log) >= 5 }) {
		for _, w := range workers {
			log := w.decisions()
			t.Logf("%s: %d decisions, %d by the store since the kill; last: %+v", w.key, len(log), recovered(log), log[len(log)-1])
		}
		t.Fatalf("decisions did not resume through the new primary %s within %v of killing %s", promotedAddr, resume, old)
	}
	halt()

	// The timeline, over all workers.
	var lastOK, firstFail, firstBack, lastBack time.Time
	for _, w := range workers {
		var back time.Time
		for _, d := range w.decisions() {
			switch {
			case d.ok() && !d.end.After(kill):
				if d.end.After(lastOK) {
					lastOK = d.end
				}
			case !d.ok():
				if firstFail.IsZero() || d.end.Before(firstFail) {
					firstFail = d.end
				}
			case d.ok() && !d.start.Before(killed) && back.IsZero():
				back = d.end
			}
		}
		if firstBack.IsZero() || back.Before(firstBack) {
			firstBack = back
		}
		if back.After(lastBack) {
			lastBack = back
		}
	}
	ms := func(at time.Time) string { return fmt.Sprintf("%+dms", at.Sub(kill).Milliseconds()) }
	t.Logf("failover of %s to %s (down-after %v, failover-timeout %v, store timeout %v), times from the kill:",
		old, promotedAddr, redistest.SentinelDownAfter, redistest.SentinelFailoverTimeout, sentinelStoreTimeout)
	t.Logf("  last decision by the old primary  %s", ms(lastOK))
	t.Logf("  primary's process gone            %s", ms(killed))
	t.Logf("  first decision by a policy        %s", ms(firstFail))
	t.Logf("  a sentinel names the new primary  %s", ms(promoted))
	t.Logf("  first decision by the new primary %s (gap %v; %v after the sentinel named it)",
		ms(firstBack), firstBack.Sub(kill).Round(time.Millisecond), firstBack.Sub(promoted).Round(time.Millisecond))
	t.Logf("  every key decided by it again     %s", ms(lastBack))

	ctx := context.Background()
	counter := sluice.New(store)
	local := sluice.New(fallback)
	var keys []string
	byKey := make(map[string][]sentinelDecision)
	for _, w := range workers {
		log := w.decisions()
		sentinelCheckPolicy(t, w, log)
		if byKey[w.key] == nil {
			keys = append(keys, w.key)
		}
		byKey[w.key] = append(byKey[w.key], log...)
	}
	t.Logf("the count of each key (pre: admits the old primary confirmed; post: admits since the kill; failed: decisions that failed, each of which may or may not have consumed):")
	var confirmed, lost int
	for _, key := range keys {
		log := byKey[key]
		// The old primary confirmed the admits that started before the
		// kill; the new one starts from what had reached the replica and
		// keeps every admit that started after the kill.
		pre := sentinelCount(log, func(d sentinelDecision) bool { return d.ok() && d.start.Before(killed) })
		post := recovered(log)
		failed := sentinelCount(log, func(d sentinelDecision) bool { return !d.ok() })
		r, err := counter.AllowN(ctx, key, limit, 0)
		if err != nil || r.Degraded != sluice.NotDegraded {
			t.Fatalf("%s: count after the failover: %+v, %v", key, r, err)
		}
		count := sentinelCapacity - r.Remaining
		if count < post || count > pre+post+failed {
			t.Errorf("%s: the store counts %d admits; want at least the %d admitted since the kill and at most %d (+%d before it, +%d failed)",
				key, count, post, pre+post+failed, pre, failed)
		}
		// What the replica had when it took over (if no failed decision
		// consumed on it).
		replicated := count - post
		confirmed += pre
		if replicated < pre {
			lost += pre - replicated
		}
		t.Logf("  %-8s pre %5d  replicated %5d  post %4d  failed %4d  count now %5d", key, pre, replicated, post, failed, count)

		if strings.HasPrefix(key, "local") {
			// The fallback counted exactly the decisions it made.
			degraded := sentinelCount(log, func(d sentinelDecision) bool { return d.r.Degraded != sluice.NotDegraded })
			r, err := local.AllowN(ctx, key, limit, 0)
			if err != nil || sentinelCapacity-r.Remaining != degraded {
				t.Errorf("%s: the fallback counts %d (%v), want the %d decisions it made", key, sentinelCapacity-r.Remaining, err, degraded)
			}
		}
	}
	t.Logf("admits the old primary confirmed: %d; of those, missing on the promoted replica: %d", confirmed, lost)
}

// sentinelCheckPolicy checks every decision of one worker: the store's
// decisions admit, and during the outage the policy answers as documented,
// with an error only under ReturnErrors.
func sentinelCheckPolicy(t *testing.T, w *sentinelWorker, log []sentinelDecision) {
	t.Helper()
	var failed, errs, degraded int
	next := sentinelCapacity // the fallback's next Remaining (local)
	var sample error
	for i, d := range log {
		if d.ok() {
			if !d.r.Allowed || d.r.Limit != sentinelCapacity {
				t.Errorf("%s: decision %d by the store = %+v, want admitted with Limit %d", w.key, i, d.r, sentinelCapacity)
			}
			continue
		}
		failed++
		if d.err != nil {
			errs++
			if sample == nil {
				sample = d.err
			}
			if w.policy != "return" {
				t.Errorf("%s: decision %d returned an error under %s: %v", w.key, i, w.policy, d.err)
			}
			if errors.Is(d.err, context.Canceled) {
				t.Errorf("%s: decision %d canceled: %v", w.key, i, d.err)
			}
			continue
		}
		degraded++
		r := d.r
		switch w.policy {
		case "return":
			t.Errorf("%s: decision %d degraded under return: %+v", w.key, i, r)
		case "allow":
			if !r.Allowed {
				t.Errorf("%s: decision %d = %+v, want admitted by the policy", w.key, i, r)
			}
		case "deny":
			if r.Allowed || r.RetryAfter != sluice.DegradedRetryAfter {
				t.Errorf("%s: decision %d = %+v, want denied by the policy, RetryAfter %v", w.key, i, r, sluice.DegradedRetryAfter)
			}
		case "local":
			// Decided by the fallback, which starts from a full bucket,
			// whatever the store had counted.
			next--
			if !r.Allowed || r.Remaining != next {
				t.Errorf("%s: decision %d = %+v, want admitted by the fallback with %d remaining", w.key, i, r, next)
			}
		}
	}
	if failed == 0 {
		t.Errorf("%s: no decision fell in the outage", w.key)
	}
	t.Logf("%s: %d decisions, %d during the outage: %d errors, %d degraded results%s",
		w.key, len(log), failed, errs, degraded, sentinelSample(sample))
}

func sentinelSample(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if i := strings.Index(s, "\n"); i >= 0 {
		s = s[:i]
	}
	return " (" + s + ")"
}
