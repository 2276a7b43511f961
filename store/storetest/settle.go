package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// The settle scenarios (Store.TakeAt, Refund and Charge) compare
// a subject key with its twin: the twin sees the same requests, but where
// the subject takes and is refunded or charged, the twin takes what that
// should leave. The subject must then answer every later request exactly
// as its twin does, and its state live no longer than the twin's needs.

// settler returns s: every Store settles.
func settler(_ *testing.T, s sluice.Store) sluice.Store { return s }

// twins is a subject key and its twin under the same limits, in one env.
type twins struct {
	e             *env
	subject, twin string
	limits        []sluice.Limit
	// twinWrote is when (by the real clock) the twin was last asked
	// anything, and lived the subject's TTL under each limit just before
	// the refund or charge (mark): a server expires keys by its own clock.
	twinWrote time.Time
	lived     []time.Duration
}

// mark reads the subject's state lifetime under each limit, just before
// its refund or charge at Epoch+at (the store's clock set to it).
func (k *twins) mark(at time.Duration) {
	k.e.t.Helper()
	k.e.clock.Set(at)
	k.lived = nil
	ttler, ok := k.e.store.(TTLer)
	if !ok {
		return
	}
	for _, l := range k.limits {
		ttl, err := ttler.TTL(context.Background(), k.subject, l)
		if err != nil {
			k.e.t.Fatal(err)
		}
		k.lived = append(k.lived, ttl)
	}
}

// newTwins returns the twins of case i, in an env of their own, under
// limits (nil: 10 per minute under each algorithm).
func newTwins(t *testing.T, newStore Factory, i int, limits []sluice.Limit) *twins {
	if limits == nil {
		limits = everyAlgorithm(10)
	}
	return &twins{e: newEnv(t, newStore), limits: limits, subject: fmt.Sprintf("subject-%d", i), twin: fmt.Sprintf("twin-%d", i)}
}

// take decides a request of cost at Epoch+at on key under every limit of
// k through the store's TakeAt.
func (k *twins) take(key string, at time.Duration, cost int) sluice.Taken {
	k.e.t.Helper()
	if key == k.twin {
		k.twinWrote = time.Now()
	}
	tk, err := settler(k.e.t, k.e.store).TakeAt(context.Background(), sluice.Request{
		Parts: []sluice.Part{{Key: key, Limits: k.limits, Cost: cost}},
		Now:   Epoch.Add(at),
	})
	if err != nil {
		k.e.t.Fatal(err)
	}
	if len(tk.Results) != len(k.limits) || len(tk.At) != len(k.limits) {
		k.e.t.Fatalf("TakeAt returned %d results and %d instants for %d limits", len(tk.Results), len(tk.At), len(k.limits))
	}
	for i := range tk.At {
		if !tk.At[i].Equal(Epoch.Add(at)) {
			k.e.t.Fatalf("TakeAt of a request at %v reports %v for %s", Epoch.Add(at), tk.At[i], k.limits[i])
		}
	}
	return tk
}

// both takes cost at Epoch+at on the subject and the twin.
func (k *twins) both(steps []refundStep) {
	for _, st := range steps {
		k.take(k.subject, st.at, st.cost)
		k.take(k.twin, st.at, st.cost)
	}
}

// one decides a request of cost at Epoch+at on key under l alone.
func (k *twins) one(key string, l sluice.Limit, at time.Duration, cost int) sluice.Result {
	k.e.t.Helper()
	if key == k.twin {
		k.twinWrote = time.Now()
	}
	rs, err := k.e.store.Take(context.Background(), sluice.Request{
		Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: cost}},
		Now:   Epoch.Add(at),
	})
	if err != nil {
		k.e.t.Fatal(err)
	}
	return rs[0]
}

// drain spends key under l at Epoch+at until a request of cost 1 is
// denied, first what it reports remaining at once, and returns how much
// was admitted and the denial.
func (k *twins) drain(key string, l sluice.Limit, at time.Duration) (int, sluice.Result) {
	t := k.e.t
	t.Helper()
	n := k.one(key, l, at, 0).Remaining
	if n > 0 && !k.one(key, l, at, n).Allowed {
		t.Fatalf("%s: %q denied the %d it reported remaining", l, key, n)
	}
	for ; n <= l.Capacity(); n++ {
		if r := k.one(key, l, at, 1); !r.Allowed {
			return n, r
		}
	}
	t.Fatalf("%s: %q admitted more than %d at one instant", l, key, l.Capacity())
	return 0, sluice.Result{}
}

// compare checks the subject against its twin under each of its limits
// from Epoch+at on: after, the states the refund or charge reported (nil:
// read them); the state's lifetime; then the same requests on both, all
// limits at one instant before any later one (a store that evicts what
// expired long ago, as the memory store does, would forget the state of
// one limit while the clock visits later instants for another), and so
// the limits of more, twins whose state is read. With
// slack(l), the subject may be behind its twin under l by up to that much
// refill, never ahead.
func (k *twins) compare(after []sluice.Result, at time.Duration, slack func(l sluice.Limit) time.Duration, more ...*twins) {
	t := k.e.t
	t.Helper()
	if slack == nil {
		slack = func(sluice.Limit) time.Duration { return 0 }
	}
	type probe struct {
		what          string
		l             sluice.Limit
		subject, twin sluice.Result
	}
	var probes []probe
	k.e.clock.Set(at) // the store's clock too, for TTL
	sets := append([]*twins{k}, more...)
	for i, k := range sets {
		if i > 0 {
			after = nil
		}
		for j, l := range k.limits {
			if ttler, ok := k.e.store.(TTLer); ok {
				ttl, err := ttler.TTL(context.Background(), k.subject, l)
				if err != nil {
					t.Fatal(err)
				}
				// A server expires keys by its own clock, while the fake one
				// jumps: the twin's TTL as its last request set it (which may
				// precede at), what its state needs at at, and what the
				// subject's lived before the refund or charge (a refund that
				// writes nothing leaves it) bound the subject's.
				twinTTL, err := ttler.TTL(context.Background(), k.twin, l)
				if err != nil {
					t.Fatal(err)
				}
				twinSet := twinTTL
				if !k.twinWrote.IsZero() {
					twinSet += time.Since(k.twinWrote)
				}
				need := k.one(k.twin, l, at, 0).ResetAfter
				most := max(twinSet, need)
				if k.lived != nil {
					most = max(most, k.lived[j])
				}
				if most = (most + slack(l)).Round(time.Millisecond) + time.Millisecond; ttl > most || ttl == 0 && need > 0 {
					t.Errorf("%s: the subject's state lives %v; the twin's %v and needs %v", l, ttl, twinTTL, need)
				}
			}
			a := k.one(k.subject, l, at, 0)
			if after != nil {
				a = after[j]
			}
			probes = append(probes, probe{"the answer", l, a, k.one(k.twin, l, at, 0)})
			sn, sr := k.drain(k.subject, l, at)
			tn, tr := k.drain(k.twin, l, at)
			if sn > tn || slack(l) == 0 && sn != tn {
				t.Errorf("%s: the subject admits %d, its twin %d", l, sn, tn)
			} else if sn == tn {
				probes = append(probes, probe{"the denial after draining", l, sr, tr})
			}
		}
	}
	for _, d := range []time.Duration{20 * time.Second, 61 * time.Second, 125 * time.Second} {
		for _, k := range sets {
			for _, l := range k.limits {
				probes = append(probes, probe{fmt.Sprintf("the state %v later", d), l, k.one(k.subject, l, at+d, 0), k.one(k.twin, l, at+d, 0)})
			}
		}
	}
	for _, p := range probes {
		sr, tr, slack := p.subject, p.twin, slack(p.l)
		behind := func(a, b time.Duration) bool { return a >= b && a-b <= slack }
		switch {
		case sr == tr:
		case slack == 0:
			t.Errorf("%s: %s: subject %+v, twin %+v", p.l, p.what, sr, tr)
		case sr.Allowed != tr.Allowed || sr.Remaining > tr.Remaining || !behind(sr.ResetAfter, tr.ResetAfter) || !behind(sr.RetryAfter, tr.RetryAfter):
			t.Errorf("%s: %s: subject %+v, twin %+v: not behind by at most %v", p.l, p.what, sr, tr, slack)
		default:
			t.Logf("%s: %s: subject %+v, twin %+v: given back %v less than exact", p.l, p.what, sr, tr, sr.ResetAfter-tr.ResetAfter)
		}
	}
}

// refundStep is a request of cost at Epoch+at.
type refundStep struct {
	at   time.Duration
	cost int
}

// everyAlgorithm returns a limit of n per minute under each algorithm
// (token_bucket and gcra: a token every minute/n, a burst of n).
func everyAlgorithm(n int) []sluice.Limit {
	var limits []sluice.Limit
	for _, a := range sluice.Algorithms {
		limits = append(limits, sluice.PerMinute(n).Using(a))
	}
	return limits
}

// testRefund: for every algorithm, a take refunded in full (as a decision
// split over Cluster slots does when a later slot denies, and a
// reservation settled at 0) leaves the key's state as if the take had
// never happened: the subject answers every later request as its twin,
// which saw all the other requests and not the take, and its state lives
// no longer than the twin's needs. The one exception is documented: when
// the bucket came within the cost of full and another request took from
// it between take and refund, token_bucket and gcra give back less, by at
// most the refill of that time: the subject is then never more permissive
// than its twin, and no more than that behind.
func testRefund(t *testing.T, newStore Factory) {
	const s = time.Second
	tests := []struct {
		name    string
		limits  []sluice.Limit // nil: 10 per minute under each algorithm
		before  []refundStep   // on both keys
		take    refundStep     // on the subject, given back at refund
		between []refundStep   // on both keys, after the take
		refund  time.Duration
	}{
		{name: "fresh key", take: refundStep{0, 3}},
		{name: "after others", before: []refundStep{{0, 2}, {20 * s, 3}}, take: refundStep{30 * s, 2}, refund: 30 * s},
		{name: "refunded later", before: []refundStep{{0, 2}, {20 * s, 3}}, take: refundStep{30 * s, 2}, refund: 30*s + 5*time.Millisecond},
		{name: "refunded in the next window", before: []refundStep{{10 * s, 2}}, take: refundStep{55 * s, 2}, refund: 65 * s},
		{name: "refunded two windows later", before: []refundStep{{10 * s, 2}}, take: refundStep{55 * s, 2}, refund: 125 * s},
		{name: "a take in the next window between", before: []refundStep{{10 * s, 2}}, take: refundStep{55 * s, 2}, between: []refundStep{{65 * s, 2}}, refund: 66 * s},
		{name: "takes between", before: []refundStep{{0, 2}}, take: refundStep{30 * s, 2}, between: []refundStep{{30 * s, 1}, {30*s + time.Millisecond, 2}}, refund: 30*s + 2*time.Millisecond},
		{name: "a take between at one instant", take: refundStep{0, 4}, between: []refundStep{{0, 3}}},
		{name: "a take between, near full", take: refundStep{0, 1}, between: []refundStep{{4 * s, 1}}, refund: 5 * s},
		// sliding_log adds and removes members in batches of 1000.
		{name: "large costs", limits: everyAlgorithm(5000), before: []refundStep{{0, 1500}}, take: refundStep{0, 2200}, between: []refundStep{{0, 1000}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newTwins(t, newStore, i, tt.limits)
			e, limits := k.e, k.limits
			k.both(tt.before)
			taken := k.take(k.subject, tt.take.at, tt.take.cost)
			for j, r := range taken.Results {
				if !r.Allowed {
					t.Fatalf("the take to give back was denied by %s: %+v", limits[j], r)
				}
			}
			k.both(tt.between)
			k.mark(tt.refund)
			req := sluice.Request{Parts: []sluice.Part{{Key: k.subject, Limits: limits, Cost: tt.take.cost}}, Now: Epoch.Add(tt.refund)}
			after, err := settler(t, e.store).Refund(context.Background(), req, taken)
			if err != nil {
				t.Fatal(err)
			}
			k.compare(after, tt.refund, func(l sluice.Limit) time.Duration {
				if bucket := l.Algorithm == sluice.TokenBucket || l.Algorithm == sluice.GCRA; bucket && len(tt.between) > 0 {
					return tt.refund - tt.take.at
				}
				return 0
			})
		})
	}
}

// testRefundCases: the refunds that cannot be as if the take had
// consumed less, each with what every algorithm does instead. twin is the
// cost the twin takes at the take's instant, by algorithm: the state the
// subject must be left in.
func testRefundCases(t *testing.T, newStore Factory) {
	const s = time.Second
	windows := func(w, logged, buckets int) func(a sluice.Algorithm) int {
		return func(a sluice.Algorithm) int {
			switch a {
			case sluice.FixedWindow, sluice.SlidingWindow:
				return w
			case sluice.SlidingLog:
				return logged
			}
			return buckets
		}
	}
	tests := []struct {
		name    string
		before  []refundStep
		take    refundStep
		refund  time.Duration
		give    int  // the refund's cost
		unknown bool // a refund without the take's Taken
		twin    func(a sluice.Algorithm) int
	}{
		// A refund of more than the take spent, and than the state holds:
		// windows and logs change nothing, a bucket fills.
		{name: "more than spent", take: refundStep{10 * s, 3}, refund: 10 * s, give: 5, twin: windows(3, 3, -2)},
		// Without the take's instant: the window of now, the newest entries
		// of a log, a bucket up to full. Within the window: as if exact.
		{name: "take not known", before: []refundStep{{0, 2}}, take: refundStep{10 * s, 4}, refund: 12 * s, give: 3, unknown: true, twin: windows(1, 1, 1)},
		// In the next window a fixed window has nothing to give back to,
		// nor has a sliding window, whose earlier window keeps the take.
		{name: "take not known, next window", take: refundStep{55 * s, 4}, refund: 65 * s, give: 3, unknown: true, twin: windows(4, 1, 1)},
		{name: "take not known, more than the log holds", take: refundStep{10 * s, 2}, refund: 12 * s, give: 3, unknown: true, twin: windows(2, 2, -2)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, newStore)
			for j, l := range everyAlgorithm(10) {
				k := &twins{e: e, limits: []sluice.Limit{l}, subject: fmt.Sprintf("subject-%d-%d", i, j), twin: fmt.Sprintf("twin-%d-%d", i, j)}
				k.both(tt.before)
				taken := k.take(k.subject, tt.take.at, tt.take.cost)
				switch tw := tt.twin(l.Algorithm); {
				case tw >= 0:
					k.take(k.twin, tt.take.at, tw)
				default: // a bucket that fills: the twin saw nothing
					if err := e.store.Reset(context.Background(), k.twin, l); err != nil {
						t.Fatal(err)
					}
				}
				if tt.unknown {
					taken = sluice.Taken{}
				}
				k.mark(tt.refund)
				req := sluice.Request{Parts: []sluice.Part{{Key: k.subject, Limits: k.limits, Cost: tt.give}}, Now: Epoch.Add(tt.refund)}
				after, err := settler(t, e.store).Refund(context.Background(), req, taken)
				if err != nil {
					t.Fatal(err)
				}
				k.compare(after, tt.refund, nil)
			}
		})
	}
}

// testSettle: a reservation of max settled at actual leaves the key as
// if it had taken actual (the twin), for every algorithm: settled at once
// or later, in the same window or after it, below, at or above what it
// reserved (above: the twin takes max at the reservation and the rest at
// the settle, where the charge counts), under a limit changed in between
// (same identity), and for the parts of a stacked reservation.
func testSettle(t *testing.T, newStore Factory) {
	const s = time.Second
	tests := []struct {
		name           string
		limits         []sluice.Limit // nil: 10 per minute under each algorithm
		before         []refundStep
		reserve        refundStep
		settle         refundStep // at, actual
		changed        func(l sluice.Limit) sluice.Limit
		stackedLimitOf int  // > 0: reserve a second part, under this limit of the others
		resume         bool // settle the reservation as another process would: Resume(Taken())
	}{
		{name: "at once", reserve: refundStep{0, 6}, settle: refundStep{0, 2}},
		{name: "actual 0", before: []refundStep{{0, 3}}, reserve: refundStep{5 * s, 6}, settle: refundStep{5 * s, 0}},
		{name: "actual as reserved", before: []refundStep{{0, 3}}, reserve: refundStep{5 * s, 6}, settle: refundStep{8 * s, 6}},
		{name: "later", before: []refundStep{{0, 1}}, reserve: refundStep{20 * s, 8}, settle: refundStep{23 * s, 3}},
		{name: "in the next window", before: []refundStep{{10 * s, 2}}, reserve: refundStep{50 * s, 7}, settle: refundStep{70 * s, 1}},
		{name: "two windows later", before: []refundStep{{10 * s, 2}}, reserve: refundStep{50 * s, 7}, settle: refundStep{130 * s, 1}},
		{name: "above the reservation", before: []refundStep{{0, 1}}, reserve: refundStep{10 * s, 2}, settle: refundStep{10 * s, 7}},
		{name: "above the reservation, later", before: []refundStep{{0, 1}}, reserve: refundStep{10 * s, 2}, settle: refundStep{15 * s, 5}},
		{name: "large costs", limits: everyAlgorithm(5000), before: []refundStep{{0, 1500}}, reserve: refundStep{0, 3000}, settle: refundStep{0, 700}},
		{name: "limit changed", before: []refundStep{{0, 2}}, reserve: refundStep{10 * s, 6}, settle: refundStep{10 * s, 1},
			changed: func(l sluice.Limit) sluice.Limit { l.Limit = 20; return l }},
		{name: "stacked", before: []refundStep{{0, 2}}, reserve: refundStep{10 * s, 6}, settle: refundStep{12 * s, 3}, stackedLimitOf: 3},
		{name: "resumed", before: []refundStep{{0, 1}}, reserve: refundStep{20 * s, 8}, settle: refundStep{23 * s, 3}, resume: true},
		{name: "resumed, above the reservation", before: []refundStep{{0, 1}}, reserve: refundStep{10 * s, 2}, settle: refundStep{15 * s, 5}, resume: true},
		{name: "resumed, stacked", before: []refundStep{{0, 2}}, reserve: refundStep{10 * s, 6}, settle: refundStep{12 * s, 3}, stackedLimitOf: 3, resume: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newTwins(t, newStore, i, tt.limits)
			e, limits := k.e, k.limits
			k.both(tt.before)
			parts := []sluice.Part{{Key: k.subject, Limits: limits, Cost: tt.reserve.cost}}
			var second *twins
			if tt.stackedLimitOf > 0 {
				// A second client key under another limit, whose part costs
				// 1 and is settled at 1 (a count per request beside a budget).
				second = &twins{e: e, limits: []sluice.Limit{limits[tt.stackedLimitOf].Named("requests")}, subject: k.subject + "-2", twin: k.twin + "-2"}
				parts = append(parts, sluice.Part{Key: second.subject, Limits: second.limits, Cost: 1})
				second.take(second.twin, tt.reserve.at, 1)
			}
			e.clock.Set(tt.reserve.at)
			r, err := e.lim.ReserveParts(context.Background(), parts...)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Allowed {
				t.Fatalf("the reservation was denied: %+v", r.MultiResult)
			}
			if tt.resume {
				parts, taken, ok := r.Taken()
				if !ok {
					t.Fatal("Taken of an admitted reservation: not ok")
				}
				if r, err = e.lim.Resume(parts, taken); err != nil {
					t.Fatal(err)
				}
			}
			actual := tt.settle.cost
			if actual <= tt.reserve.cost {
				k.take(k.twin, tt.reserve.at, actual)
			} else {
				k.take(k.twin, tt.reserve.at, tt.reserve.cost)
				k.take(k.twin, tt.settle.at, actual-tt.reserve.cost)
			}
			reserved := slices.Clone(limits)
			if tt.changed != nil {
				// A reload between reservation and settle: the twins are
				// read under the new limit (which converts a bucket).
				for j, l := range limits {
					limits[j] = tt.changed(l)
				}
				k.both([]refundStep{{tt.reserve.at, 0}})
			}
			k.mark(tt.settle.at)
			var got sluice.MultiResult
			if second == nil {
				got, err = r.Settle(context.Background(), actual)
			} else {
				got, err = r.SettleParts(context.Background(), actual, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.changed != nil {
				// The settle is a request under the limits reserved, which
				// keeps a bucket measured at their interval: as the twin's
				// next request under them would.
				if _, err := e.store.Take(context.Background(), sluice.Request{Parts: []sluice.Part{{Key: k.twin, Limits: reserved}}, Now: Epoch.Add(tt.settle.at)}); err != nil {
					t.Fatal(err)
				}
			}
			if len(got.Results) != len(limits)+len(parts)-1 {
				t.Fatalf("Settle returned %d results for %d limits", len(got.Results), len(limits)+len(parts)-1)
			}
			after := got.Results[:len(limits)]
			if actual == tt.reserve.cost || tt.changed != nil {
				// The reservation's own Results (no store call), or the
				// state under the limits reserved: read it.
				after = nil
			}
			if second == nil {
				k.compare(after, tt.settle.at, nil)
				return
			}
			if r := second.one(second.subject, second.limits[0], tt.settle.at, 0); got.Results[len(limits)] != r {
				t.Errorf("Settle: %s: %+v, the state %+v", second.limits[0], got.Results[len(limits)], r)
			}
			// One comparison of both parts, so that the clock visits each
			// instant once for all their keys.
			k.compare(after, tt.settle.at, nil, second)
		})
	}
}

// testDebt: a settle above what a limit holds is charged all the same (a
// debt, capped at the limit's capacity), never denied, and the key's next
// requests are denied with the RetryAfter until it is repaid: 10 per
// minute reserved in full at 0 and settled at 25 counts 20.
func testDebt(t *testing.T, newStore Factory) {
	const s = time.Second
	want := map[sluice.Algorithm]struct {
		after  sluice.Result // Settle's answer
		denied time.Duration // a request of cost 1 is denied here
		admits step          // and admitted here
	}{
		// 20 counted in the window of [0, 60s).
		sluice.FixedWindow: {deny(0, 60*s, 60*s), 59 * s, step{60 * s, 1, ok(9, 60*s)}},
		// 20 in the window before weigh 20×(1−e/60s): 1 more fits in 10 at
		// e = 33s.
		sluice.SlidingWindow: {deny(0, 120*s, 90*s), 93*s - time.Microsecond, step{93 * s, 1, ok(0, 87*s)}},
		// 20 entries at 0.
		sluice.SlidingLog: {deny(0, 60*s, 60*s), 59 * s, step{60 * s, 1, ok(9, 60*s)}},
		// A debt of 20 tokens of 6s, 10 beyond the bucket: a token's worth
		// is back at 66s.
		sluice.TokenBucket: {deny(0, 120*s, 60*s), 66*s - time.Microsecond, step{66 * s, 1, ok(0, 60*s)}},
		sluice.GCRA:        {deny(0, 120*s, 60*s), 66*s - time.Microsecond, step{66 * s, 1, ok(0, 60*s)}},
	}
	each(t, func(t *testing.T, a sluice.Algorithm) {
		e := newEnv(t, newStore)
		l := sluice.PerMinute(10).Using(a)
		e.clock.Set(0)
		r, err := e.lim.Reserve(context.Background(), "debtor", l, 10)
		if err != nil || !r.Allowed {
			t.Fatalf("Reserve: %+v, %v", r, err)
		}
		got, err := r.Settle(context.Background(), 25)
		if err != nil {
			t.Fatal(err)
		}
		w := want[a]
		w.after.Limit = 10
		if got.Result != w.after {
			t.Errorf("Settle(25) = %+v, want %+v", got.Result, w.after)
		}
		e.clock.Set(w.denied)
		if r, err := e.lim.AllowN(context.Background(), "debtor", l, 1); err != nil || r.Allowed {
			t.Errorf("at %v: %+v, %v; want a denial while in debt", w.denied, r, err)
		}
		e.run("debtor", l, []step{w.admits})
	})
}

// testSettleErrors: a reservation is settled once; a denied one holds
// nothing to settle; an actual cost is not negative, and SettleParts
// takes one per part.
func testSettleErrors(t *testing.T, newStore Factory) {
	e := newEnv(t, newStore)
	l := sluice.PerMinute(10).Using(sluice.FixedWindow)
	ctx := context.Background()
	r, err := e.lim.Reserve(ctx, "k", l, 8)
	if err != nil || !r.Allowed {
		t.Fatalf("Reserve: %+v, %v", r, err)
	}
	if _, err := r.Settle(ctx, -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("Settle(-1): %v, want ErrInvalidCost", err)
	}
	if _, err := r.SettleParts(ctx, 1, 1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("SettleParts of 2 for 1 part: %v, want ErrInvalidCost", err)
	}
	if got, err := r.Settle(ctx, 3); err != nil || got.Remaining != 7 {
		t.Errorf("Settle(3): %+v, %v; want 7 remaining", got, err)
	}
	if _, err := r.Settle(ctx, 3); !errors.Is(err, sluice.ErrSettled) {
		t.Errorf("a second Settle: %v, want ErrSettled", err)
	}
	denied, err := e.lim.Reserve(ctx, "k", l, 8)
	if err != nil || denied.Allowed {
		t.Fatalf("Reserve of 8 with 7 left: %+v, %v; want a denial", denied, err)
	}
	if _, err := denied.Settle(ctx, 0); !errors.Is(err, sluice.ErrNotReserved) {
		t.Errorf("Settle of a denied reservation: %v, want ErrNotReserved", err)
	}
	if _, _, ok := denied.Taken(); ok {
		t.Error("Taken of a denied reservation: ok, want nothing to settle elsewhere")
	}
	parts, taken, ok := r.Taken()
	if !ok {
		t.Fatal("Taken of an admitted reservation: not ok")
	}
	taken.At = taken.At[:0]
	if _, err := e.lim.Resume(parts, taken); err == nil {
		t.Error("Resume of a take without its instants: no error")
	}
	if got, err := e.lim.AllowN(ctx, "k", l, 0); err != nil || got.Remaining != 7 {
		t.Errorf("after all that: %+v, %v; want 7 remaining", got, err)
	}
}

// testLimiterRefund: Limiter.Refund, a refund whose take is not known,
// gives Cost back to what the key's latest takes consumed under every
// algorithm, across two parts at once, and changes nothing for a limit
// whose state holds less than Cost or a key never taken.
func testLimiterRefund(t *testing.T, newStore Factory) {
	for _, alg := range sluice.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			ctx := context.Background()
			l := sluice.PerMinute(10).Using(alg)
			day := sluice.PerDay(100).Using(alg)
			if r, err := e.lim.AllowParts(ctx,
				sluice.Part{Key: "a", Limits: []sluice.Limit{l}, Cost: 5},
				sluice.Part{Key: "b", Limits: []sluice.Limit{day}, Cost: 40}); err != nil || !r.Allowed {
				t.Fatalf("AllowParts: %+v, %v", r, err)
			}
			got, err := e.lim.Refund(ctx,
				sluice.Part{Key: "a", Limits: []sluice.Limit{l}, Cost: 3},
				sluice.Part{Key: "b", Limits: []sluice.Limit{day}, Cost: 25})
			if err != nil {
				t.Fatalf("Refund: %v", err)
			}
			if len(got.Results) != 2 || got.Results[0].Remaining != 8 || got.Results[1].Remaining != 85 || !got.Allowed {
				t.Errorf("Refund of 3 and 25 after takes of 5 and 40: %+v; want 8 and 85 remaining, allowed", got.Results)
			}
			if r, err := e.lim.AllowN(ctx, "a", l, 0); err != nil || r.Remaining != 8 {
				t.Errorf("after the refund: %+v, %v; want 8 remaining", r, err)
			}
			if r, err := e.lim.Refund(ctx, sluice.Part{Key: "never", Limits: []sluice.Limit{l}, Cost: 4}); err != nil || r.Remaining != 10 {
				t.Errorf("Refund of a key never taken: %+v, %v; want 10 remaining, nothing stored", r.Result, err)
			}
			if r, err := e.lim.AllowN(ctx, "never", l, 0); err != nil || r.Remaining != 10 {
				t.Errorf("a key never taken, after a refund: %+v, %v; want 10 remaining", r, err)
			}
			if alg == sluice.TokenBucket || alg == sluice.GCRA {
				return // a bucket moves back by Cost, at most to full
			}
			if r, err := e.lim.Refund(ctx, sluice.Part{Key: "a", Limits: []sluice.Limit{l}, Cost: 3}); err != nil || r.Remaining != 8 {
				t.Errorf("Refund of 3 with 2 consumed: %+v, %v; want nothing given back, 8 remaining", r.Result, err)
			}
			if _, err := e.lim.Refund(ctx, sluice.Part{Key: "a", Limits: []sluice.Limit{l}, Cost: 11}); !errors.Is(err, sluice.ErrInvalidCost) {
				t.Errorf("Refund above the capacity: %v, want ErrInvalidCost", err)
			}
		})
	}
}
