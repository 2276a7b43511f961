//go:build integration

package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// Clock skew: replicas whose clocks disagree by seconds still enforce one
// limit, because the Redis store takes the time of every decision from the
// server (TIME), not from the replica.
//
// A Go process's wall clock cannot be skewed per replica (time.Now reads the
// vDSO, so libfaketime has no effect), so the skew is injected through the
// one door sluice has for a replica's time, the Limiter's clock, and the
// tests compare two arms over the same three replicas and the same traffic:
//
//   - replica clocks: each replica decides at its own skewed time
//     (sluice.WithClock), as a limiter that trusts replica clocks would.
//     It admits more than the limit, which shows what skew does and that
//     the traffic detects it.
//   - Redis clock: the default, no WithClock. The skew is still present in
//     each replica (its LocalOnError fallback store runs on the skewed
//     clock), but under the Redis store sluice's decision path does not
//     read the replica's clock at all: Request.Now stays zero and the
//     script asks the server. It admits exactly the limit, or exactly what
//     the server time that elapsed during the test may add.

// skewOffsets are the replicas' clocks: one on time, one 7s ahead, one 7s
// behind.
var skewOffsets = []time.Duration{0, 7 * time.Second, -7 * time.Second}

const (
	skewLimit = 100 // per day in TestSkew, in both arms
	skewDay   = 24 * time.Hour
	// skewEarly is how long before the limit frees up (in true time) the
	// skewed replicas ask: the replica 7s ahead reads a time 4s after it.
	skewEarly = 3 * time.Second
)

// skewRelease is, for PerDay(skewLimit) under each algorithm, how long
// after the whole limit is spent at once (at the start of a day window)
// an honest limiter first admits again; want is what the replica clocks
// admit when the skewed replicas ask skewEarly before that.
var skewRelease = map[sluice.Algorithm]struct {
	after time.Duration
	want  int
}{
	// The window ends: the replica 7s ahead is in the next one and spends
	// a whole new limit. The one 7s behind counts against the newest
	// window stored (never an older one) and is denied.
	sluice.FixedWindow: {skewDay, 2 * skewLimit},
	// The spent window's weight in the next one has fallen by one request
	// (a day/100 into it); 7s ahead is one request's worth.
	sluice.SlidingWindow: {skewDay + skewDay/skewLimit, skewLimit + 1},
	// Every entry expires at once: the replica 7s ahead sees an empty log.
	// The one 7s behind counts both sets of entries and is denied.
	sluice.SlidingLog: {skewDay, 2 * skewLimit},
	// One token comes back every day/100.
	sluice.TokenBucket: {skewDay / skewLimit, skewLimit + 1},
	sluice.GCRA:        {skewDay / skewLimit, skewLimit + 1},
}

// skewReplicas makes three replicas of one Redis, each with clients of
// its own (rueidis, go-redis, rueidis); admin reads the server's TIME.
// The replicas' clients belong to the test that asks for them (the
// subtest), and are closed when it ends.
type skewReplicas struct {
	addr  string
	admin rueidis.Client
}

func newSkewReplicas(t *testing.T, addr string) skewReplicas {
	return skewReplicas{addr, newRueidis(t, addr)}
}

// limiters returns one Limiter per replica, sharing a key space of their
// own, over clients closed when t ends; opts(i) configures replica i.
func (c skewReplicas) limiters(t *testing.T, opts func(i int) []sluice.Option) []*sluice.Limiter {
	stores := replicaStores(len(skewOffsets),
		func() rueidis.Client { return newRueidis(t, c.addr) },
		func() *goredislib.Client { return newGoRedis(t, c.addr) }, prefix())
	return limitersOver(stores, opts)
}

// replicaClocks returns limiters for t that decide at clock's time plus
// each replica's offset.
func (c skewReplicas) replicaClocks(t *testing.T, clock *storetest.Clock, offsets []time.Duration) []*sluice.Limiter {
	return c.limiters(t, func(i int) []sluice.Option {
		return []sluice.Option{sluice.WithClock(func() time.Time { return clock.Now().Add(offsets[i]) })}
	})
}

// serverClock returns limiters that leave the time to the store, each
// with a fallback store on its own skewed clock. Any store failure fails
// t: the fallback, not Redis, would have decided.
func (c skewReplicas) serverClock(t *testing.T) []*sluice.Limiter {
	return c.limiters(t, func(i int) []sluice.Option {
		local := func() time.Time { return time.Now().Add(skewOffsets[i]) }
		return []sluice.Option{
			sluice.WithErrorPolicy(sluice.LocalOnError(memory.New(memory.WithClock(local)))),
			sluice.WithHooks(sluice.Hooks{StoreError: func(_ context.Context, err error) {
				t.Errorf("replica %d (clock %v): store failed, its skewed fallback decided: %v", i, skewOffsets[i], err)
			}}),
			// A loaded machine must not hand a slow decision to the
			// fallback (the default bound under LocalOnError is 1s).
			sluice.WithStoreTimeout(time.Minute),
		}
	})
}

// skewTraffic is the traffic of every arm: replica 0 spends the whole
// limit of one key (4 goroutines × 30 requests), then between() runs, then
// the replicas 7s ahead and 7s behind ask at once (4 goroutines × 30
// requests each). It returns how many requests were admitted.
func skewTraffic(t *testing.T, lims []*sluice.Limiter, l sluice.Limit, between func()) int {
	t.Helper()
	n := storetest.Hammer(t, lims[:1], "client", 4, 30, l)
	between()
	return n + storetest.Hammer(t, lims[1:], "client", 4, 30, l)
}

// skewServerTime returns the server's TIME in µs.
func skewServerTime(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	v, err := c.Do(context.Background(), c.B().Time().Build()).AsStrSlice()
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME = %v, %v", v, err)
	}
	s, err1 := strconv.ParseInt(v[0], 10, 64)
	us, err2 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME = %v", v)
	}
	return s*1_000_000 + us
}

// skewServerArm plays skewTraffic on limiters with the server's clock and
// checks that they admitted l's capacity, plus at most what the server
// time elapsed meanwhile (TIME before and after) frees. It returns the
// count, the elapsed server time and the most it allowed.
func skewServerArm(t *testing.T, c skewReplicas, l sluice.Limit) (got int, elapsed time.Duration, most int) {
	t.Helper()
	lims := c.serverClock(t)
	t0 := skewServerTime(t, c.admin)
	got = skewTraffic(t, lims, l, func() {})
	t1 := skewServerTime(t, c.admin)
	if t1 < t0 {
		t.Fatalf("the server's clock stepped back during the test (TIME %d, then %d): no allowance can be computed", t0, t1)
	}
	elapsed = time.Duration(t1-t0) * time.Microsecond
	most = l.Capacity() + skewAllowance(l, t0, t1)
	if got < l.Capacity() || got > most {
		t.Errorf("%s, Redis clock: admitted %d; want %d, plus at most %d for the %v of server time the test took", l, got, l.Capacity(), most-l.Capacity(), elapsed)
	}
	return got, elapsed, most
}

// skewAllowance returns how many requests beyond l's capacity an honest
// limiter may admit to a fresh key whose every decision falls between
// server times t0 and t1 (µs, t0 <= t1): what the window boundaries,
// expiries and refills inside that time free.
func skewAllowance(l sluice.Limit, t0, t1 int64) int {
	p := l.Period.Microseconds()
	switch l.Algorithm {
	case sluice.FixedWindow:
		return l.Limit * int(t1/p-t0/p) // a whole limit per window begun
	case sluice.SlidingWindow:
		switch n := t1/p - t0/p; n {
		case 0:
			return 0 // the count of one window is at most the limit
		case 1:
			// a admitted in the first window (a <= Limit), c in the next
			// by t1, e = t1 - boundary: a(P-e)/P + c <= Limit, so
			// a + c <= Limit + a·e/P <= Limit + Limit·e/P.
			return int(int64(l.Limit) * (t1 % p) / p)
		default:
			return l.Limit * int(n) // at most the limit in every window
		}
	case sluice.SlidingLog:
		return l.Limit * int((t1-t0)/p) // at most the limit in every period
	default: // token_bucket, gcra: one token per interval, from a full bucket
		return int((t1 - t0) / l.Interval().Microseconds())
	}
}

// TestSkew: for every algorithm, three replicas with clocks 0, +7s and -7s
// apart spend PerDay(100). Trusting replica clocks admits more than 100;
// the Redis clock admits exactly 100.
//
// A 7s skew only matters where the limit frees up within 7s, so the
// replica-clock arm runs on a fake clock: replica 0 spends the limit at
// the start of a day window (storetest.Epoch; all state then lives about a
// day of real server time, however slow the test), and the other two ask
// 3s (true time) before the limit frees up. A control with agreeing clocks
// at the same times admits exactly 100, so the excess is the skew's
// alone. The Redis-clock arm cannot wait a day: the same requests run
// back to back in real time, which an honest clock must also hold to 100
// (a day's period: only a day boundary inside the test, once in ~10^6
// runs, could free more, and skewAllowance says exactly how much). For
// the same reason, this arm alone would not catch replicas deciding on
// real clocks 7s apart: nothing a day's limit holds frees within 7s of
// the present. TestSkewServerClockRefill, with a short period, does.
func TestSkew(t *testing.T) {
	srv := redistest.Start(t)
	c := newSkewReplicas(t, srv.Addr)
	for _, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			rel, ok := skewRelease[a]
			if !ok {
				t.Fatalf("no release time for %s: add it to skewRelease", a)
			}
			l := sluice.PerDay(skewLimit).Using(a)
			ask := func(clock *storetest.Clock) func() {
				return func() { clock.Set(rel.after - skewEarly) }
			}

			clock := storetest.NewClock()
			skewed := skewTraffic(t, c.replicaClocks(t, clock, skewOffsets), l, ask(clock))
			switch {
			case skewed <= skewLimit:
				t.Errorf("%s, replica clocks ±7s: admitted %d; want more than %d (the replica 7s ahead reads a time past the release)", l, skewed, skewLimit)
			case skewed != rel.want:
				t.Errorf("%s, replica clocks ±7s: admitted %d; skewRelease predicts %d", l, skewed, rel.want)
			}

			clock = storetest.NewClock()
			agreeing := skewTraffic(t, c.replicaClocks(t, clock, []time.Duration{0, 0, 0}), l, ask(clock))
			if agreeing != skewLimit {
				t.Errorf("%s, agreeing replica clocks: admitted %d; want exactly %d (the traffic asks before the release)", l, agreeing, skewLimit)
			}

			server, elapsed, most := skewServerArm(t, c, l)
			t.Logf("%s: replica clocks ±7s admitted %d for a limit of %d (agreeing clocks: %d); Redis clock admitted %d (%v of server time: at most %d)",
				a, skewed, skewLimit, agreeing, server, elapsed, most)
		})
	}
}

// TestSkewServerClockRefill: with a refill fast enough that 7s of skew
// matters (a token per second, 20 at most), token_bucket and gcra on the
// Redis clock admit no more than a full bucket plus the tokens the server
// time that elapsed during the test refilled (about one a second); on
// replica clocks 7s apart the replica ahead finds 7 tokens more although
// no time passed (a frozen fake clock), and the same bound is broken. The
// bound would also catch replicas that decided on real clocks 7s apart,
// unless the test took the 20s that fill the bucket anyway: the one ahead
// would find up to 7 tokens more than the elapsed time refilled (adding
// WithClock(time.Now()+offset) to serverClock, runs admitted 27 where 20
// were allowed).
func TestSkewServerClockRefill(t *testing.T) {
	srv := redistest.Start(t)
	c := newSkewReplicas(t, srv.Addr)
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		t.Run(string(a), func(t *testing.T) {
			// A token a second, 20 at most: full again after 20s.
			l := sluice.PerMinute(60).WithBurst(20).Using(a)
			capacity := l.Capacity()
			const ahead = 7 // tokens that 7s of skew refill

			// No time passes on the frozen clock: an honest limiter admits
			// exactly a full bucket. The replica 7s ahead takes the 7
			// tokens its clock says came back; the one 7s behind reads a
			// time before the last refill and finds none. (There is no
			// agreeing-clocks control here, unlike TestSkew: the state's
			// TTL is real server time, and a loaded machine that paused 20s
			// between the phases would let it expire, which on a frozen
			// clock refills.)
			clock := storetest.NewClock()
			skewed := skewTraffic(t, c.replicaClocks(t, clock, skewOffsets), l, func() {})
			switch {
			case skewed <= capacity:
				t.Errorf("%s, replica clocks ±7s on a frozen clock: admitted %d; want more than %d (the replica 7s ahead refills the bucket)", l, skewed, capacity)
			case skewed != capacity+ahead:
				t.Errorf("%s, replica clocks ±7s on a frozen clock: admitted %d; want %d, a full bucket and the %d tokens 7s refill", l, skewed, capacity+ahead, ahead)
			}

			server, elapsed, most := skewServerArm(t, c, l)
			t.Logf("%s: replica clocks ±7s admitted %d with no time elapsed (a full bucket is %d); Redis clock admitted %d in %v of server time, which allows at most %d",
				l, skewed, capacity, server, elapsed, most)
		})
	}
}
