//go:build integration

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// TestCoalesceKeepsNoRequestPastTake: a decision whose caller leaves
// (its context ends) after its batch was sent returns at once, and
// the Limiter then reuses the memory of its request (onePool: "Nothing
// keeps a request past the store call that decides it"). The batch's
// sender must not read that request afterwards; under -race, reading
// the departed caller's limits when the batch's reply comes back
// (takeBatch -> results(cl.g.limits, ...)) is a data race with the
// Limiter clearing them.
func TestCoalesceKeepsNoRequestPastTake(t *testing.T) {
	srv := redistest.Start(t)
	t.Cleanup(srv.Stop)
	admin := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(newRueidis(t, srv.Addr), prefix())
	lim := sluice.New(store)
	ctx := context.Background()
	if err := admin.Do(ctx, admin.B().ClientPause().Timeout(60000).Write().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	unpause := func() {
		if err := admin.Do(ctx, admin.B().ClientUnpause().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// Four calls in flight, blocked by the pause, whose callers leave
	// later: that ends their calls and sends the queue as one batch.
	inCtx, inCancel := context.WithCancel(ctx)
	defer inCancel()
	inflight := make(chan error, redis.MaxInFlight)
	for i := range redis.MaxInFlight {
		go func() {
			_, err := store.Take(inCtx, one("inflight"+strconv.Itoa(i), 1))
			inflight <- err
		}()
	}
	eventually(t, "the calls in flight", func() bool { busy, _ := store.Lanes(); return busy == redis.MaxInFlight })

	// x decides through a Limiter (its pooled request), y directly.
	xCtx, xCancel := context.WithCancel(ctx)
	defer xCancel()
	x := make(chan error, 1)
	go func() {
		_, err := lim.Allow(xCtx, "x", window)
		x <- err
	}()
	eventually(t, "x queued", func() bool { _, q := store.Lanes(); return q == 1 })
	y := queue(t, ctx, store, 1, "y")[0]

	inCancel()
	for i := range redis.MaxInFlight {
		if err := within(t, "in flight", inflight); !errors.Is(err, context.Canceled) {
			t.Fatalf("in flight %d: %v, want context.Canceled", i, err)
		}
	}
	// The queue went as one batch, still blocked by the pause.
	eventually(t, "the batch sent", func() bool { busy, q := store.Lanes(); return busy == 1 && q == 0 })

	xCancel()
	if err := within(t, "x", x); !errors.Is(err, context.Canceled) {
		t.Fatalf("x after its batch was sent: %v, want context.Canceled", err)
	}
	// x's Limiter has put its request back in the pool; the reply of
	// the batch arrives now.
	unpause()
	if err := within(t, "y", y); err != nil {
		t.Errorf("y: %v", err)
	}
	eventually(t, "the lane idle", func() bool { busy, q := store.Lanes(); return busy == 0 && q == 0 })
}

// TestWindowAddInPlaceKeepsOwnNowTTL: a window's count is added in place
// (INCRBY, keeping the key's TTL) only at the server's clock, on the
// premise that the key's TTL was set at the server's clock for the same
// window end. A request with its own Now ahead of the server's (a replica
// with WithClock), in the server's current window, SETs the key with a
// TTL that much shorter; a later server-clock request in that window
// then INCRBYs and keeps that short TTL, where a SET would have set it
// to the window's end. The key expires before the window ends (by the
// server's clock) and the window admits its limit again: over-admission.
// Both as separate calls and with the two requests in one batch.
func TestWindowAddInPlaceKeepsOwnNowTTL(t *testing.T) {
	srv := redistest.Start(t)
	admin := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(newRueidis(t, srv.Addr), prefix())
	ctx := context.Background()
	const period = 3 * time.Second
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Limit: 2, Period: period}
	p := period.Microseconds()
	// Start early in a window of the server's clock.
	now := skewServerTime(t, admin)
	for now%p > 300_000 {
		time.Sleep(time.Duration(p-now%p) * time.Microsecond)
		now = skewServerTime(t, admin)
	}
	end := (now/p + 1) * p
	own := time.UnixMicro(now + 1_500_000) // 1.5 s ahead, same window
	req := func(key string, at time.Time) sluice.Request {
		return sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: 1}}, Now: at}
	}
	// "calls": own Now, then the server's clock, as two calls.
	for _, r := range []sluice.Request{req("calls", own), req("calls", time.Time{})} {
		if rs, err := store.Take(ctx, r); err != nil || !rs[0].Allowed {
			t.Fatalf("calls: %+v, %v; want admitted", rs, err)
		}
	}
	// "batch": the same two in one batch.
	got, _, err := store.TakeBatch(ctx, []sluice.Request{req("batch", own), req("batch", time.Time{})})
	if err != nil || !got[0][0].Allowed || !got[1][0].Allowed {
		t.Fatalf("batch: %+v, %v; want both admitted", got, err)
	}
	// Both windows are full: 2 of 2 in the server's window.
	for _, key := range []string{"calls", "batch"} {
		if rs, err := store.Take(ctx, req(key, time.Time{})); err != nil || rs[0].Allowed {
			t.Fatalf("%s, third in the window: %+v, %v; want denied", key, rs, err)
		}
	}
	// Past the own-Now request's TTL, still in the server's window.
	time.Sleep(time.Duration(end-1_500_000+200_000-skewServerTime(t, admin)) * time.Microsecond)
	if n := skewServerTime(t, admin); n >= end-200_000 {
		t.Fatalf("the machine was too slow for the test: at %d µs, the window ends at %d", n, end)
	}
	for _, key := range []string{"calls", "batch"} {
		ttl, _ := store.TTL(ctx, key, l)
		rs, err := store.Take(ctx, req(key, time.Time{}))
		if err != nil || rs[0].Allowed {
			t.Errorf("%s, in the same window of the server's clock, %v before its end: %+v, %v; want denied (2 of 2 already admitted in it; the key's TTL was %v)",
				key, time.Duration(end-skewServerTime(t, admin))*time.Microsecond, rs, err, ttl)
		}
	}
}

// panicking is a Client over a real rueidis client whose first calls
// panic, as a Client adapter with a bug would (New takes any Client);
// the rest go to the server.
type panicking struct {
	c    rueidis.Client
	left atomic.Int32
}

func (p *panicking) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	if p.left.Add(-1) >= 0 {
		panic("client adapter bug")
	}
	v, err := p.c.Do(ctx, p.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).AsIntSlice()
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
		return nil, fmt.Errorf("%w: %w", redis.ErrNoScript, err)
	}
	return v, err
}

func (p *panicking) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return p.c.Do(ctx, p.c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).AsIntSlice()
}

// TestCoalescePanicFreesLane: a decision whose script call panics (a
// Client's bug, recovered by the caller, as net/http recovers a
// handler's panic) must not keep its lane's call in flight: after
// MaxInFlight such panics, every later decision would wait in the queue
// for a call that never ends, until its context does (forever without a
// deadline). Without coalescing (WithBatch(1)) nothing sticks.
func TestCoalescePanicFreesLane(t *testing.T) {
	srv := redistest.Start(t)
	for _, batch := range []int{redis.DefaultBatch, 1} {
		t.Run(fmt.Sprint("batch ", batch), func(t *testing.T) {
			c := &panicking{c: newRueidis(t, srv.Addr)}
			c.left.Store(redis.MaxInFlight)
			store := redis.New(c, prefix(), redis.WithBatch(batch))
			ctx := context.Background()
			for i := range redis.MaxInFlight {
				func() {
					defer func() {
						if recover() == nil {
							t.Fatalf("decision %d: no panic", i)
						}
					}()
					_, _ = store.Take(ctx, one("p", 1))
				}()
			}
			if busy, q := store.Lanes(); busy != 0 || q != 0 {
				t.Errorf("after the panics: %d calls in flight, %d queued; want none", busy, q)
			}
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if rs, err := store.Take(tctx, one("p", 1)); err != nil || !rs[0].Allowed {
				t.Errorf("a decision after the panics: %+v, %v; want admitted (no call in flight)", rs, err)
			}
		})
	}
}

// TestCoalesceLeaversNoOverAdmission: through a Limiter (whose AllowN
// request is pooled and cleared as soon as Take returns), callers whose
// deadlines end while their decisions are queued or in flight, among
// callers that wait for their answers, on one hot key: a batch that reads
// a departed caller's cleared limit after it was sent decides that key
// under the zero Limit (a token bucket of capacity 0, whose decision
// deletes the key), and the window admits again. At most the limit may be
// admitted.
func TestCoalesceLeaversNoOverAdmission(t *testing.T) {
	srv := redistest.Start(t)
	store := redis.FromRueidis(newRueidis(t, srv.Addr), prefix())
	lim := sluice.New(store)
	const limit = 20
	l := sluice.PerDay(limit).Using(sluice.FixedWindow)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for w := range 48 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for time.Now().Before(stop) {
				d := 5 * time.Second // waits for its answer
				if w%2 == 0 {
					d = time.Duration(rng.IntN(400)) * time.Microsecond // leaves
				}
				ctx, cancel := context.WithTimeout(context.Background(), d)
				r, err := lim.Allow(ctx, "hot", l)
				cancel()
				if err == nil && r.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if batches, _, _ := store.Coalesced(); batches == 0 {
		t.Error("no batch sent: the test did not exercise coalescing")
	}
	if n := admitted.Load(); n > limit {
		t.Errorf("admitted %d, limit %d per day: over-admission", n, limit)
	}
}
