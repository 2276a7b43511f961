package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	sluiceredis "github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/storetest"
)

// refundStep is a request of cost at Epoch+at.
type refundStep struct {
	at   time.Duration
	cost int
}

// refundKeys is a subject key, whose take is given back, and its twin,
// which sees every request but that take, under the same limits.
type refundKeys struct {
	store         *sluiceredis.Store
	subject, twin string
	limits        []sluice.Limit
}

// take decides a request of cost at Epoch+at on key under every limit.
func (k *refundKeys) take(t *testing.T, key string, at time.Duration, cost int) []sluice.Result {
	t.Helper()
	rs, err := k.store.Take(context.Background(), sluice.Request{
		Parts: []sluice.Part{{Key: key, Limits: k.limits, Cost: cost}},
		Now:   storetest.Epoch.Add(at),
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// one decides a request of cost at Epoch+at on key under l alone.
func (k *refundKeys) one(t *testing.T, key string, l sluice.Limit, at time.Duration, cost int) sluice.Result {
	t.Helper()
	rs, err := k.store.Take(context.Background(), sluice.Request{
		Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: cost}},
		Now:   storetest.Epoch.Add(at),
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

// ttl returns how long the state of key under l lives.
func (k *refundKeys) ttl(t *testing.T, key string, l sluice.Limit) time.Duration {
	t.Helper()
	d, err := k.store.TTL(context.Background(), key, l)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// drain spends key under l at Epoch+at until a request of cost 1 is
// denied, first what it reports remaining at once, and returns how much
// was admitted and the denial.
func (k *refundKeys) drain(t *testing.T, key string, l sluice.Limit, at time.Duration) (int, sluice.Result) {
	t.Helper()
	n := k.one(t, key, l, at, 0).Remaining
	if n > 0 && !k.one(t, key, l, at, n).Allowed {
		t.Fatalf("%s: %q denied the %d it reported remaining", l, key, n)
	}
	for ; n <= l.Capacity(); n++ {
		if r := k.one(t, key, l, at, 1); !r.Allowed {
			return n, r
		}
	}
	t.Fatalf("%s: %q admitted more than %d at one instant", l, key, l.Capacity())
	return 0, sluice.Result{}
}

// TestRefund: for every algorithm, a take given back (as a decision split
// over Cluster slots does when a later slot denies) leaves the key's state
// as if the take had never happened: the subject key answers every later
// request as its twin, which saw all the other requests and not the take,
// and its state lives no longer than the twin's needs. The one exception
// is documented: when the bucket came within the cost of full and another
// request took from it between take and refund, token_bucket and gcra
// give back less, by at most the refill of that time: the subject is then
// never more permissive than its twin, and no more than that behind.
func TestRefund(t *testing.T) {
	srv := redistest.Start(t)
	store := sluiceredis.FromRueidis(newRueidis(t, srv.Addr), prefix())
	each := func(n int) []sluice.Limit {
		var limits []sluice.Limit
		for _, a := range sluice.Algorithms {
			limits = append(limits, sluice.PerMinute(n).Using(a))
		}
		return limits
	}
	const s = time.Second
	tests := []struct {
		name    string
		limits  []sluice.Limit // nil: 10 per minute under each algorithm (token_bucket, gcra: one per 6s)
		before  []refundStep   // on both keys
		take    refundStep     // on the subject, given back at refund
		between []refundStep   // on both keys, after the take
		refund  time.Duration
	}{
		{name: "fresh key", take: refundStep{0, 3}},
		{name: "after others", before: []refundStep{{0, 2}, {20 * s, 3}}, take: refundStep{30 * s, 2}, refund: 30 * s},
		{name: "refunded later", before: []refundStep{{0, 2}, {20 * s, 3}}, take: refundStep{30 * s, 2}, refund: 30*s + 5*time.Millisecond},
		{name: "refunded in the next window", before: []refundStep{{10 * s, 2}}, take: refundStep{55 * s, 2}, refund: 65 * s},
		{name: "a take in the next window between", before: []refundStep{{10 * s, 2}}, take: refundStep{55 * s, 2}, between: []refundStep{{65 * s, 2}}, refund: 66 * s},
		{name: "takes between", before: []refundStep{{0, 2}}, take: refundStep{30 * s, 2}, between: []refundStep{{30 * s, 1}, {30*s + time.Millisecond, 2}}, refund: 30*s + 2*time.Millisecond},
		{name: "a take between at one instant", take: refundStep{0, 4}, between: []refundStep{{0, 3}}},
		{name: "a take between, near full", take: refundStep{0, 1}, between: []refundStep{{4 * s, 1}}, refund: 5 * s},
		// sliding_log adds and removes members in batches of 1000.
		{name: "large costs", limits: each(5000), before: []refundStep{{0, 1500}}, take: refundStep{0, 2200}, between: []refundStep{{0, 1000}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limits := tt.limits
			if limits == nil {
				limits = each(10)
			}
			k := &refundKeys{store: store, limits: limits, subject: fmt.Sprintf("subject-%d", i), twin: fmt.Sprintf("twin-%d", i)}
			for _, st := range tt.before {
				k.take(t, k.subject, st.at, st.cost)
				k.take(t, k.twin, st.at, st.cost)
			}
			taken := k.take(t, k.subject, tt.take.at, tt.take.cost)
			for j, r := range taken {
				if !r.Allowed {
					t.Fatalf("the take to give back was denied by %s: %+v", limits[j], r)
				}
			}
			for _, st := range tt.between {
				k.take(t, k.subject, st.at, st.cost)
				k.take(t, k.twin, st.at, st.cost)
			}
			req := sluice.Request{Parts: []sluice.Part{{Key: k.subject, Limits: limits, Cost: tt.take.cost}}, Now: storetest.Epoch.Add(tt.take.at)}
			after, err := store.Refund(context.Background(), req, taken, storetest.Epoch.Add(tt.refund))
			if err != nil {
				t.Fatal(err)
			}
			for j, l := range limits {
				var slack time.Duration
				if bucket := l.Algorithm == sluice.TokenBucket || l.Algorithm == sluice.GCRA; bucket && len(tt.between) > 0 {
					slack = tt.refund - tt.take.at
				}
				k.compare(t, l, after[j], tt.refund, slack)
			}
		})
	}
}

// compare checks the subject against its twin under l from refund on:
// the state the refund reported, the state's lifetime, then the same
// requests on both. With slack, the subject may be behind its twin by up
// to that much refill, never ahead.
func (k *refundKeys) compare(t *testing.T, l sluice.Limit, after sluice.Result, refund, slack time.Duration) {
	t.Helper()
	ttl := k.ttl(t, k.subject, l)
	// Redis expires keys on its own clock: the twin's TTL, set at its last
	// request (which may precede the refund), and what its state needs at
	// the refund bound the subject's.
	twinTTL := k.ttl(t, k.twin, l)
	twin := k.one(t, k.twin, l, refund, 0)
	if most := (max(twinTTL, twin.ResetAfter) + slack).Round(time.Millisecond) + time.Millisecond; ttl > most || ttl == 0 && twin.ResetAfter > 0 {
		t.Errorf("%s: the state lives %v after the refund; the twin's %v and needs %v", l, ttl, twinTTL, twin.ResetAfter)
	}
	type probe struct {
		what          string
		subject, twin sluice.Result
	}
	probes := []probe{{what: "the refund's answer", subject: after, twin: twin}}
	sn, sr := k.drain(t, k.subject, l, refund)
	tn, tr := k.drain(t, k.twin, l, refund)
	if sn > tn || slack == 0 && sn != tn {
		t.Errorf("%s: the subject admits %d at the refund, its twin %d", l, sn, tn)
	} else if sn == tn {
		probes = append(probes, probe{"the denial after draining", sr, tr})
	}
	for _, d := range []time.Duration{20 * time.Second, 61 * time.Second, 125 * time.Second} {
		probes = append(probes, probe{fmt.Sprintf("the state %v after the refund", d), k.one(t, k.subject, l, refund+d, 0), k.one(t, k.twin, l, refund+d, 0)})
	}
	behind := func(a, b time.Duration) bool { return a >= b && a-b <= slack }
	for _, p := range probes {
		sr, tr := p.subject, p.twin
		switch {
		case sr == tr:
		case slack == 0:
			t.Errorf("%s: %s: subject %+v, twin %+v", l, p.what, sr, tr)
		case sr.Allowed != tr.Allowed || sr.Remaining > tr.Remaining || !behind(sr.ResetAfter, tr.ResetAfter) || !behind(sr.RetryAfter, tr.RetryAfter):
			t.Errorf("%s: %s: subject %+v, twin %+v: not behind by at most %v", l, p.what, sr, tr, slack)
		default:
			t.Logf("%s: %s: subject %+v, twin %+v: given back %v less than exact", l, p.what, sr, tr, sr.ResetAfter-tr.ResetAfter)
		}
	}
}
