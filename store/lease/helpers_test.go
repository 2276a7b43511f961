package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// counting wraps a real store and counts its Take calls, and records every
// admitted take (its instant and cost) in rec when rec is set. Unless
// settles is set it cannot settle (TakeAt, Refund and Charge fail with
// errors.ErrUnsupported), so that a lease Store over it gives nothing
// back; with it, TakeAt counts and records as Take does and Refund and
// Charge are the real store's.
type counting struct {
	sluice.Store
	settles bool
	takes   atomic.Int64
	refunds atomic.Int64
	rec     *recorder
}

func (c *counting) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	c.takes.Add(1)
	rs, err := c.Store.Take(ctx, req)
	if err == nil && c.rec != nil && rs[0].Allowed {
		c.rec.add(req.Now, req.Parts[0].Cost)
	}
	return rs, err
}

func (c *counting) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	if !c.settles {
		return sluice.Taken{}, errors.ErrUnsupported
	}
	c.takes.Add(1)
	t, err := c.Store.TakeAt(ctx, req)
	if err == nil && c.rec != nil && t.Results[0].Allowed {
		c.rec.add(req.Now, req.Parts[0].Cost)
	}
	return t, err
}

func (c *counting) Refund(ctx context.Context, req sluice.Request, t sluice.Taken) ([]sluice.Result, error) {
	if !c.settles {
		return nil, errors.ErrUnsupported
	}
	c.refunds.Add(1)
	return c.Store.Refund(ctx, req, t)
}

func (c *counting) Charge(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	if !c.settles {
		return nil, errors.ErrUnsupported
	}
	return c.Store.Charge(ctx, req)
}

// recorder collects units by instant, safe for concurrent use.
type recorder struct {
	mu sync.Mutex
	at map[time.Time]int
}

func newRecorder() *recorder { return &recorder{at: map[time.Time]int{}} }

func (r *recorder) add(t time.Time, n int) {
	r.mu.Lock()
	r.at[t] += n
	r.mu.Unlock()
}

// in returns the units recorded in [a, b).
func (r *recorder) in(a, b time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for t, u := range r.at {
		if !t.Before(a) && t.Before(b) {
			n += u
		}
	}
	return n
}

// instants returns the recorded instants.
func (r *recorder) instants() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := make([]time.Time, 0, len(r.at))
	for t := range r.at {
		ts = append(ts, t)
	}
	return ts
}

// phaseClock is a clock that stands still during a phase of a test and is
// moved between phases.
type phaseClock struct{ t atomic.Int64 }

func (c *phaseClock) set(t time.Time) { c.t.Store(t.UnixMicro()) }
func (c *phaseClock) Now() time.Time  { return time.UnixMicro(c.t.Load()).UTC() }

// one is a request of cost n for key under l at now.
func one(key string, l sluice.Limit, n int, now time.Time) sluice.Request {
	return sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: n}}, Now: now}
}

// take decides req on s, failing t on an error.
func take(t *testing.T, s sluice.Store, req sluice.Request) sluice.Result {
	t.Helper()
	rs, err := s.Take(context.Background(), req)
	if err != nil {
		t.Fatalf("Take(%+v): %v", req, err)
	}
	if len(rs) != req.Len() {
		t.Fatalf("Take returned %d results for %d limits", len(rs), req.Len())
	}
	return rs[0]
}
