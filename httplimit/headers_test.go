package httplimit_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/store/memory"
)

// t0 is the time of the header tests' decisions: Unix 1767225600.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestSetHeaders(t *testing.T) {
	login1m := sluice.PerMinute(5).Using(sluice.SlidingWindow).Named("login-1m")
	login1h := sluice.PerHour(20).Using(sluice.FixedWindow).Named("login-1h")
	tests := []struct {
		name    string
		mode    httplimit.HeaderMode
		limits  []sluice.Limit
		results []sluice.Result
		binding int
		now     time.Time
		pk      []byte
		want    map[string]string // every rate-limit field; absent ones must be absent
	}{
		{
			name:    "one limit allowed",
			limits:  []sluice.Limit{login1m},
			results: []sluice.Result{{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 60 * time.Second}},
			now:     t0,
			want: map[string]string{
				"RateLimit-Policy":      `"login-1m";q=4;w=60`,
				"RateLimit":             `"login-1m";r=4;t=60`,
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "4",
				"X-RateLimit-Reset":     "1767225660",
			},
		},
		{
			name:   "two limits denied",
			limits: []sluice.Limit{login1m, login1h},
			results: []sluice.Result{
				{Limit: 5, Remaining: 0, ResetAfter: 42 * time.Second, RetryAfter: 12 * time.Second},
				{Allowed: true, Limit: 20, Remaining: 15, ResetAfter: 1800*time.Second + 500*time.Millisecond},
			},
			now: t0.Add(300 * time.Millisecond),
			want: map[string]string{
				"RateLimit-Policy":      `"login-1m";q=4;w=60, "login-1h";q=20;w=3600`,
				"RateLimit":             `"login-1m";r=0;t=12, "login-1h";r=15;t=1801`,
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "1767225643", // 42.3s after t0, rounded up
			},
		},
		{
			name:   "binding second, allowed",
			limits: []sluice.Limit{login1m, login1h},
			results: []sluice.Result{
				{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 12 * time.Second},
				{Allowed: true, Limit: 20, Remaining: 1, ResetAfter: time.Hour},
			},
			binding: 1,
			now:     t0,
			want: map[string]string{
				"RateLimit-Policy":      `"login-1m";q=4;w=60, "login-1h";q=20;w=3600`,
				"RateLimit":             `"login-1m";r=4;t=12, "login-1h";r=1;t=3600`,
				"X-RateLimit-Limit":     "20",
				"X-RateLimit-Remaining": "1",
				"X-RateLimit-Reset":     "1767229200",
			},
		},
		{
			name:    "token bucket: q is the pace, not the burst",
			limits:  []sluice.Limit{sluice.PerSecond(5).WithBurst(20).Named("search")},
			results: []sluice.Result{{Allowed: true, Limit: 20, Remaining: 19, ResetAfter: 200 * time.Millisecond}},
			now:     t0,
			want: map[string]string{
				"RateLimit-Policy":      `"search";q=5;w=1`,
				"RateLimit":             `"search";r=19;t=1`,
				"X-RateLimit-Limit":     "20",
				"X-RateLimit-Remaining": "19",
				"X-RateLimit-Reset":     "1767225601",
			},
		},
		{
			name:   "partition key",
			limits: []sluice.Limit{login1m, login1h},
			results: []sluice.Result{
				{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 12 * time.Second},
				{Allowed: true, Limit: 20, Remaining: 19, ResetAfter: 180 * time.Second},
			},
			now: t0,
			pk:  []byte{0xde, 0xad, 0xbe, 0xef, 0x01},
			want: map[string]string{
				"RateLimit-Policy":      `"login-1m";q=4;w=60;pk=:3q2+7wE=:, "login-1h";q=20;w=3600;pk=:3q2+7wE=:`,
				"RateLimit":             `"login-1m";r=4;t=12;pk=:3q2+7wE=:, "login-1h";r=19;t=180;pk=:3q2+7wE=:`,
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "4",
				"X-RateLimit-Reset":     "1767225612",
			},
		},
		{
			name:    "empty partition key is none",
			limits:  []sluice.Limit{login1m},
			results: []sluice.Result{{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Second}},
			now:     t0,
			pk:      []byte{},
			want: map[string]string{
				"RateLimit-Policy":      `"login-1m";q=4;w=60`,
				"RateLimit":             `"login-1m";r=4;t=1`,
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "4",
				"X-RateLimit-Reset":     "1767225601",
			},
		},
		{
			name: "rounding up",
			limits: []sluice.Limit{
				sluice.Per(3, 1500*time.Millisecond).Using(sluice.FixedWindow).Named("a"),
				sluice.Per(1, time.Millisecond).Using(sluice.FixedWindow).Named("b"),
				sluice.PerSecond(1).Named("c"),
			},
			results: []sluice.Result{
				{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 1200 * time.Millisecond},
				{Allowed: true, Limit: 1, Remaining: 1, ResetAfter: 0},
				{Allowed: true, Limit: 1, Remaining: 1, ResetAfter: time.Microsecond},
			},
			now: t0.Add(time.Nanosecond),
			want: map[string]string{
				"RateLimit-Policy":      `"a";q=4;w=2, "b";q=1000;w=1, "c";q=1;w=1`,
				"RateLimit":             `"a";r=2;t=2, "b";r=1;t=0, "c";r=1;t=1`,
				"X-RateLimit-Limit":     "3",
				"X-RateLimit-Remaining": "2",
				"X-RateLimit-Reset":     "1767225602", // t0 + 1ns + 1.2s, rounded up
			},
		},
		{
			name: "invalid limits and huge quotas",
			limits: []sluice.Limit{
				{Limit: 5, Name: "no-period"},
				{Algorithm: "leaky", Limit: 5, Period: time.Minute, Name: "unknown"},
				sluice.Per(int(hugeLimit), time.Millisecond).Using(sluice.FixedWindow).Named("huge"),
			},
			results: []sluice.Result{
				{Allowed: true, Limit: 5, Remaining: 4},
				{Allowed: true, Limit: 5, Remaining: 4},
				{Allowed: true, Limit: int(hugeLimit), Remaining: int(hugeLimit) - 1},
			},
			now: t0,
			want: map[string]string{
				"RateLimit-Policy":      `"no-period";q=5, "unknown";q=5;w=60, "huge";q=999999999999999;w=1`,
				"RateLimit":             `"no-period";r=4;t=0, "unknown";r=4;t=0, "huge";r=1099511627775;t=0`,
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "4",
				"X-RateLimit-Reset":     "1767225600",
			},
		},
		{
			name:    "reset now on a whole second",
			limits:  []sluice.Limit{login1m},
			results: []sluice.Result{{Allowed: true, Limit: 5, Remaining: 5}},
			now:     t0,
			want: map[string]string{
				"RateLimit-Policy":      `"login-1m";q=4;w=60`,
				"RateLimit":             `"login-1m";r=5;t=0`,
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "5",
				"X-RateLimit-Reset":     "1767225600",
			},
		},
		{
			name:    "never negative",
			limits:  []sluice.Limit{login1m},
			results: []sluice.Result{{Limit: 5, Remaining: -3, ResetAfter: -time.Second}},
			now:     t0.Add(time.Millisecond),
			want: map[string]string{
				"RateLimit-Policy":      `"login-1m";q=4;w=60`,
				"RateLimit":             `"login-1m";r=0;t=0`,
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "1767225601",
			},
		},
		{
			name: "names outside sf-string escaped or replaced",
			limits: []sluice.Limit{
				sluice.PerSecond(1).Named(`a"b\c`),
				sluice.PerSecond(2).Named("café\n"),
				sluice.PerSecond(3).Named(""),
			},
			results: []sluice.Result{
				{Allowed: true, Limit: 1, Remaining: 0},
				{Allowed: true, Limit: 2, Remaining: 1},
				{Allowed: true, Limit: 3, Remaining: 2},
			},
			now: t0,
			want: map[string]string{
				"RateLimit-Policy":      `"a\"b\\c";q=1;w=1, "caf??";q=2;w=1, "1s";q=2;w=1`,
				"RateLimit":             `"a\"b\\c";r=0;t=0, "caf??";r=1;t=0, "1s";r=2;t=0`,
				"X-RateLimit-Limit":     "1",
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "1767225600",
			},
		},
		{
			name:    "ietf only",
			mode:    httplimit.HeadersIETF,
			limits:  []sluice.Limit{login1m},
			results: []sluice.Result{{Limit: 5, ResetAfter: 42 * time.Second, RetryAfter: 12 * time.Second}},
			now:     t0,
			want: map[string]string{
				"RateLimit-Policy": `"login-1m";q=4;w=60`,
				"RateLimit":        `"login-1m";r=0;t=12`,
			},
		},
		{
			name:    "legacy only",
			mode:    httplimit.HeadersLegacy,
			limits:  []sluice.Limit{login1m},
			results: []sluice.Result{{Limit: 5, ResetAfter: 42 * time.Second, RetryAfter: 12 * time.Second}},
			now:     t0,
			want: map[string]string{
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "1767225642",
			},
		},
		{
			name:    "none",
			mode:    httplimit.HeadersNone,
			limits:  []sluice.Limit{login1m},
			results: []sluice.Result{{Limit: 5, ResetAfter: 42 * time.Second, RetryAfter: 12 * time.Second}},
			now:     t0,
			want:    map[string]string{},
		},
		{
			name:    "unknown mode writes nothing",
			mode:    httplimit.HeaderMode(17),
			limits:  []sluice.Limit{login1m},
			results: []sluice.Result{{Allowed: true, Limit: 5, Remaining: 4}},
			now:     t0,
			want:    map[string]string{},
		},
		{
			name:    "binding out of range: no legacy fields",
			limits:  []sluice.Limit{login1m},
			results: []sluice.Result{{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Second}},
			binding: 1,
			now:     t0,
			want: map[string]string{
				"RateLimit-Policy": `"login-1m";q=4;w=60`,
				"RateLimit":        `"login-1m";r=4;t=1`,
			},
		},
		{
			name:    "more limits than results: the pairs only",
			limits:  []sluice.Limit{login1m, login1h},
			results: []sluice.Result{{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Second}},
			now:     t0,
			want: map[string]string{
				"RateLimit-Policy":      `"login-1m";q=4;w=60`,
				"RateLimit":             `"login-1m";r=4;t=1`,
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "4",
				"X-RateLimit-Reset":     "1767225601",
			},
		},
		{
			name: "no limits",
			now:  t0,
			want: map[string]string{},
		},
	}
	fields := []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}
	for _, tt := range tests {
		h := http.Header{}
		httplimit.SetHeaders(h, tt.mode, tt.limits, tt.results, tt.binding, tt.now, tt.pk)
		for _, f := range fields {
			got, want := h.Values(f), tt.want[f]
			switch {
			case want == "" && len(got) > 0:
				t.Errorf("%s: %s = %q, want none", tt.name, f, got)
			case want != "" && (len(got) != 1 || got[0] != want):
				t.Errorf("%s: %s = %q, want %q", tt.name, f, got, want)
			}
		}
		if err := checkRateLimitFields(h); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// TestSetHeadersReplaces: a second decision on the same response replaces
// the first one's fields instead of adding list members.
func TestSetHeadersReplaces(t *testing.T) {
	h := http.Header{}
	h.Add("RateLimit", `"old";r=1`)
	h.Add("X-RateLimit-Remaining", "99")
	h.Set("Content-Type", "text/plain")
	p := []sluice.Limit{sluice.PerSecond(1).Named("new")}
	httplimit.SetHeaders(h, httplimit.HeadersBoth, p, []sluice.Result{{Allowed: true, Limit: 1}}, 0, t0, nil)
	if got := h.Values("RateLimit"); len(got) != 1 || got[0] != `"new";r=0;t=0` {
		t.Errorf("RateLimit = %q, want one new value", got)
	}
	if got := h.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != "0" {
		t.Errorf("X-RateLimit-Remaining = %q, want [0]", got)
	}
	if got := h.Get("Content-Type"); got != "text/plain" {
		t.Errorf("Content-Type = %q, want it kept", got)
	}
}

// TestSetHeadersPace: for every algorithm and a range of limits (exact
// and inexact token intervals, bursts, sub-second and multi-hour periods),
// a client that sends evenly at the advertised q per w, from a fresh key
// and at several phases against the windows, is never denied by the real
// algorithm; q/w is at least half the algorithm's even pace; and q is the
// most that fits in w at that pace, so that one more per window is denied
// (which also proves that the simulation can fail).
func TestSetHeadersPace(t *testing.T) {
	shapes := []struct {
		limit  int
		period time.Duration
		burst  int // token_bucket and gcra only
	}{
		{20, time.Second, 100}, // the burst is not the quota
		{5, time.Second, 20},
		{3, time.Second, 0}, // a token per 333334µs
		{7, time.Minute, 0}, // a token per 8571429µs
		{100, time.Minute, 1000},
		{1000, time.Second, 0},
		{1, time.Second, 0},
		{10, 100 * time.Millisecond, 0},
		{3, 100 * time.Millisecond, 0}, // a token per 33334µs
		{10, 500 * time.Millisecond, 40},
		{5, 1500 * time.Millisecond, 0},
		{2, 1500 * time.Millisecond, 0},
		{20, time.Hour, 0},
		{7, 5 * time.Hour, 50}, // a token per 2571428572µs
		{1, 24 * time.Hour, 0},
	}
	for _, a := range sluice.Algorithms {
		for _, sh := range shapes {
			l := sluice.Per(sh.limit, sh.period).Using(a)
			if a == sluice.TokenBucket || a == sluice.GCRA {
				l = l.WithBurst(sh.burst)
			}
			if err := l.Validate(); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			t.Run(l.String(), func(t *testing.T) {
				t.Parallel()
				q, w := policyQW(t, l)
				pace := evenPace(l)
				if got := big.NewRat(q, w); got.Cmp(pace) > 0 {
					t.Errorf("q=%d;w=%d is %s/s, above the pace of %s/s", q, w, got.FloatString(6), pace.FloatString(6))
				} else if half := new(big.Rat).Mul(pace, big.NewRat(1, 2)); got.Cmp(half) < 0 {
					t.Errorf("q=%d;w=%d is %s/s, under half the pace of %s/s", q, w, got.FloatString(6), pace.FloatString(6))
				}
				n := min(max(10*int(q), 2000), 10000)
				for _, phase := range []time.Duration{0, time.Microsecond, l.Period/3 + 7*time.Microsecond, l.Period - time.Microsecond} {
					if k := firstDenied(t, l, q, w, phase, n); k >= 0 {
						t.Errorf("q=%d;w=%d from +%s: request %d of %d denied", q, w, phase, k, n)
					}
				}
				if a == sluice.TokenBucket || a == sluice.GCRA {
					// The pace is the refill: without a burst it still holds,
					// and one more per window drains a bucket of one at once.
					one := l.WithBurst(1)
					if q1, w1 := policyQW(t, one); q1 != q || w1 != w {
						t.Errorf("burst 1: q=%d;w=%d, want the same q=%d;w=%d", q1, w1, q, w)
					}
					if k := firstDenied(t, one, q, w, time.Microsecond, n); k >= 0 {
						t.Errorf("burst 1: request %d of %d denied", k, n)
					}
					if firstDenied(t, one, q+1, w, 0, n) < 0 {
						t.Errorf("burst 1: q=%d;w=%d never denied: q=%d is not the most", q+1, w, q)
					}
				}
				if a == sluice.FixedWindow || a == sluice.SlidingLog {
					if firstDenied(t, l, q+1, w, 0, n) < 0 {
						t.Errorf("q=%d;w=%d never denied: q=%d is not the most", q+1, w, q)
					}
				}
			})
		}
	}
}

// TestSetHeadersPaceHarness: paces the old q=Capacity;w=Period headers
// (and other overstatements) advertised are denied by the same simulation.
func TestSetHeadersPaceHarness(t *testing.T) {
	tests := []struct {
		limit sluice.Limit
		q, w  int64
	}{
		{sluice.PerSecond(20).WithBurst(100), 100, 1}, // the old header
		{sluice.PerSecond(20).WithBurst(100).Using(sluice.GCRA), 100, 1},
		{sluice.PerSecond(5).WithBurst(20), 20, 1},
		{sluice.PerSecond(3).WithBurst(1), 3, 1},                 // 333333µs apart, a token per 333334µs
		{sluice.Per(7, 5*time.Hour).WithBurst(1), 7, 18000},      // 2µs short every 7
		{sluice.PerMinute(5).Using(sluice.SlidingWindow), 5, 60}, // the old header
		{sluice.PerSecond(100).Using(sluice.SlidingWindow), 100, 1},
		{sluice.PerSecond(1).Using(sluice.SlidingWindow), 1, 1},
	}
	for _, tt := range tests {
		if firstDenied(t, tt.limit, tt.q, tt.w, 0, 2000) < 0 {
			t.Errorf("%s: q=%d;w=%d never denied", tt.limit, tt.q, tt.w)
		}
	}
}

// policyQW returns the q and w of the one item SetHeaders writes for l.
func policyQW(t *testing.T, l sluice.Limit) (q, w int64) {
	t.Helper()
	h := http.Header{}
	httplimit.SetHeaders(h, httplimit.HeadersIETF, []sluice.Limit{l}, []sluice.Result{{Allowed: true}}, 0, t0, nil)
	items, err := parseSFList(h.Get("RateLimit-Policy"))
	if err != nil || len(items) != 1 {
		t.Fatalf("%s: RateLimit-Policy %q: %v", l, h.Get("RateLimit-Policy"), err)
	}
	for _, p := range items[0].params {
		switch p.key {
		case "q":
			q = p.value.(int64)
		case "w":
			w = p.value.(int64)
		}
	}
	if q <= 0 || w <= 0 {
		t.Fatalf("%s: RateLimit-Policy %q has no positive q and w", l, h.Get("RateLimit-Policy"))
	}
	return q, w
}

// evenPace returns, in requests per second, the fastest even pace l's
// algorithm admits forever: the token refill (a token per Interval) for
// token_bucket and gcra, Limit per Period for fixed_window and
// sliding_log, Limit-1 per Period for sliding_window (one per 2×Period
// for Limit 1), whose estimate weighs a full previous window on the next.
func evenPace(l sluice.Limit) *big.Rat {
	n, p := int64(l.Limit), l.Period.Microseconds()
	switch l.Algorithm {
	case sluice.FixedWindow, sluice.SlidingLog:
		return big.NewRat(n*1e6, p)
	case sluice.SlidingWindow:
		if n == 1 {
			return big.NewRat(1e6, 2*p)
		}
		return big.NewRat((n-1)*1e6, p)
	}
	return big.NewRat(1e6, l.Interval().Microseconds())
}

// firstDenied sends n requests under l from a fresh key, evenly at q per w
// seconds (request k at t0+phase+⌊k×w/q⌋ in whole microseconds), through a
// Limiter over the memory store on a fake clock, and returns the index of
// the first one denied, or -1.
func firstDenied(t *testing.T, l sluice.Limit, q, w int64, phase time.Duration, n int) int {
	t.Helper()
	start := t0.Add(phase)
	now := start
	clock := func() time.Time { return now }
	lim := sluice.New(memory.New(memory.WithClock(clock)), sluice.WithClock(clock))
	for k := range int64(n) {
		now = start.Add(time.Duration(k*w*1e6/q) * time.Microsecond)
		res, err := lim.Allow(context.Background(), "client", l)
		if err != nil {
			t.Fatalf("%s: request %d: %v", l, k, err)
		}
		if !res.Allowed {
			return int(k)
		}
	}
	return -1
}

// TestSetHeadersNames: every item has a distinct name, and a limit's
// RateLimit item has its RateLimit-Policy item's name.
func TestSetHeadersNames(t *testing.T) {
	tests := []struct {
		name   string
		limits []sluice.Limit
		want   []string
	}{
		{"distinct names kept", []sluice.Limit{sluice.PerSecond(1).Named("a"), sluice.PerHour(9).Named("b")}, []string{"a", "b"}},
		{"repeats numbered", []sluice.Limit{sluice.PerSecond(1).Named("api"), sluice.PerMinute(2).Named("api"), sluice.PerHour(3).Named("api")}, []string{"api", "api-2", "api-3"}},
		{"a later given name kept", []sluice.Limit{sluice.PerSecond(1).Named("a"), sluice.PerSecond(2).Named("a"), sluice.PerSecond(3).Named("a-2")}, []string{"a", "a-3", "a-2"}},
		{"given names repeated with their numbers", []sluice.Limit{sluice.PerSecond(1).Named("a"), sluice.PerSecond(2).Named("a"), sluice.PerSecond(3).Named("a-2"), sluice.PerSecond(4).Named("a-2")}, []string{"a", "a-3", "a-2", "a-2-2"}},
		{"unnamed by period", []sluice.Limit{sluice.PerSecond(1), sluice.PerMinute(2), sluice.PerSecond(3), sluice.PerSecond(4)}, []string{"1s", "1m", "1s-2", "1s-3"}},
		{"unnamed periods", []sluice.Limit{sluice.Per(1, 90*time.Minute), sluice.Per(1, time.Hour+30*time.Second), sluice.Per(1, 1500*time.Millisecond), sluice.Per(1, 500*time.Millisecond), sluice.PerDay(1), sluice.Per(1, 1500*time.Microsecond)}, []string{"1h30m", "1h30s", "1.5s", "500ms", "24h", "1.5ms"}},
		{"unnamed never takes a given name", []sluice.Limit{sluice.PerSecond(1), sluice.PerSecond(2).Named("1s")}, []string{"1s-2", "1s"}},
		{"unnamed and named alike", []sluice.Limit{sluice.PerMinute(1).Named("1m"), sluice.PerMinute(2)}, []string{"1m", "1m-2"}},
		{"distinct after replacement", []sluice.Limit{sluice.PerSecond(1).Named("café"), sluice.PerSecond(2).Named("cafè")}, []string{"caf?", "caf?-2"}},
	}
	for _, tt := range tests {
		results := make([]sluice.Result, len(tt.limits))
		h := http.Header{}
		httplimit.SetHeaders(h, httplimit.HeadersBoth, tt.limits, results, 0, t0, nil)
		if err := checkRateLimitFields(h); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		for _, f := range []string{"RateLimit-Policy", "RateLimit"} {
			items, err := parseSFList(h.Get(f))
			if err != nil {
				t.Fatalf("%s: %s %q: %v", tt.name, f, h.Get(f), err)
			}
			var got []string
			for _, it := range items {
				got = append(got, it.value.(string))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("%s: %s names %q, want %q", tt.name, f, got, tt.want)
			}
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int
	}{
		{100 * time.Millisecond, 1},
		{time.Microsecond, 1},
		{0, 1},
		{-time.Second, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{1200 * time.Millisecond, 2},
		{11900 * time.Millisecond, 12},
		{12 * time.Second, 12},
		{time.Hour, 3600},
	}
	for _, tt := range tests {
		if got := httplimit.RetryAfterSeconds(tt.d); got != tt.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestParseHeaderMode(t *testing.T) {
	for _, m := range []httplimit.HeaderMode{httplimit.HeadersBoth, httplimit.HeadersIETF, httplimit.HeadersLegacy, httplimit.HeadersNone} {
		if got, err := httplimit.ParseHeaderMode(m.String()); got != m || err != nil {
			t.Errorf("ParseHeaderMode(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	for _, s := range []string{"", "Both", "IETF", "all", "legacy "} {
		if got, err := httplimit.ParseHeaderMode(s); err == nil {
			t.Errorf("ParseHeaderMode(%q) = %v, want an error", s, got)
		} else if !strings.Contains(err.Error(), "both, ietf, legacy, none") {
			t.Errorf("ParseHeaderMode(%q) error %q does not list the modes", s, err)
		}
	}
	if got := httplimit.HeaderMode(9).String(); got != "HeaderMode(9)" {
		t.Errorf("HeaderMode(9).String() = %q", got)
	}
}

// TestStructuredFieldChecker: the checker used above accepts the draft's
// own examples and rejects what the draft or RFC 9651 forbids, so that a
// pass means something.
func TestStructuredFieldChecker(t *testing.T) {
	good := []struct{ field, value string }{
		{"RateLimit-Policy", `"burst";q=100;w=60,"daily";q=1000;w=86400`},
		{"RateLimit-Policy", `"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`},
		{"RateLimit-Policy", `"permin";q=50;w=60, "perhr";q=1000;w=3600`},
		{"RateLimit-Policy", `"sliding";q=100;w=60;burst=1000`},
		{"RateLimit", `"default";r=50;t=30`},
		{"RateLimit", `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`},
		{"RateLimit", `"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`},
		{"RateLimit", `  "a";r=0;t=0 ,	"b";r=1;acme-x=?1;y=tok/en;z=-1.5  `},
	}
	for _, g := range good {
		if err := checkField(g.field, g.value); err != nil {
			t.Errorf("%s: %s: %v, want accepted", g.field, g.value, err)
		}
	}
	bad := []struct{ field, value string }{
		{"RateLimit-Policy", ``},                        // must not be empty
		{"RateLimit-Policy", `"a";w=60`},                // q is required
		{"RateLimit-Policy", `"a";q=-1`},                // q is non-negative
		{"RateLimit-Policy", `"a";q=1;w=0`},             // w is positive
		{"RateLimit-Policy", `"a";q=1;w=1.5`},           // w is an Integer
		{"RateLimit-Policy", `"a";q=1;w="60"`},          // w is an Integer
		{"RateLimit-Policy", `"a";q=1;qu=requests`},     // qu is a String
		{"RateLimit-Policy", `a;q=1`},                   // the item is a String, not a Token
		{"RateLimit-Policy", `"a";q=1234567890123456`},  // 16 digits
		{"RateLimit-Policy", `"a";q=1,`},                // trailing comma
		{"RateLimit-Policy", `"a";q=1 "b";q=2`},         // no comma
		{"RateLimit-Policy", `"a";Q=1`},                 // keys are lowercase
		{"RateLimit-Policy", `"a";q=1;q=2`},             // duplicate parameter
		{"RateLimit-Policy", `"a";q=1;pk=:not base64:`}, // bad Byte Sequence
		{"RateLimit-Policy", `"a";q=1;pk=:AB:`},         // missing padding
		{"RateLimit-Policy", `"a";q=1;pk=abc`},          // pk is a Byte Sequence
		{"RateLimit-Policy", `"a\x";q=1`},               // bad escape
		{"RateLimit-Policy", `"a;q=1`},                  // unterminated String
		{"RateLimit-Policy", "\"caf\u00e9\";q=1"},       // not ASCII
		{"RateLimit-Policy", `("a" "b");q=1`},           // inner list
		{"RateLimit", `"a";t=1`},                        // r is required
		{"RateLimit", `"a";r=1;t=-1`},                   // t is non-negative
		{"RateLimit", `"a";r=?1`},                       // r is an Integer
		{"RateLimit", `"a";r=1,,"b";r=2`},               // empty member
	}
	for _, b := range bad {
		if err := checkField(b.field, b.value); err == nil {
			t.Errorf("%s: %s accepted, want an error", b.field, b.value)
		}
	}
	if err := checkField("RateLimit", `"a"; r=1`); err != nil {
		t.Errorf(`"a"; r=1: %v, want accepted (RFC 9651 allows SP after ';')`, err)
	}
}

// checkRateLimitFields checks the RateLimit-Policy and RateLimit fields of
// h, if present, against draft-ietf-httpapi-ratelimit-headers-10 and RFC
// 9651, that both name the same policies in the same order, and that the
// legacy fields are non-negative integers.
func checkRateLimitFields(h http.Header) error {
	var names [2][]string
	for i, f := range []string{"RateLimit-Policy", "RateLimit"} {
		v := h.Values(f)
		if len(v) == 0 {
			continue
		}
		if err := checkField(f, strings.Join(v, ", ")); err != nil {
			return err
		}
		items, _ := parseSFList(strings.Join(v, ", "))
		for _, it := range items {
			names[i] = append(names[i], it.value.(string))
		}
	}
	if names[0] != nil && names[1] != nil && !slices.Equal(names[0], names[1]) {
		return fmt.Errorf("RateLimit-Policy names %q, RateLimit names %q", names[0], names[1])
	}
	for _, ns := range names {
		if len(slices.Compact(slices.Sorted(slices.Values(ns)))) != len(ns) {
			return fmt.Errorf("names %q are not distinct", ns)
		}
	}
	for _, f := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		for _, v := range h.Values(f) {
			if n, err := strconv.ParseUint(v, 10, 63); err != nil || strconv.FormatUint(n, 10) != v {
				return fmt.Errorf("%s: %q is not a non-negative integer", f, v)
			}
		}
	}
	return nil
}

// checkField checks one RateLimit-Policy or RateLimit field value (its
// lines joined with ", ").
func checkField(field, value string) error {
	items, err := parseSFList(value)
	if err != nil {
		return fmt.Errorf("%s: %s: %v", field, value, err)
	}
	if len(items) == 0 {
		return fmt.Errorf("%s: empty list", field)
	}
	required, kinds := "r", map[string]string{"r": "nonneg", "t": "nonneg", "pk": "binary"}
	if field == "RateLimit-Policy" {
		required, kinds = "q", map[string]string{"q": "nonneg", "w": "positive", "qu": "string", "pk": "binary"}
	}
	for _, it := range items {
		if _, ok := it.value.(string); !ok {
			return fmt.Errorf("%s: item %v is not a String", field, it.value)
		}
		seen := map[string]bool{}
		for _, p := range it.params {
			if seen[p.key] {
				return fmt.Errorf("%s: parameter %s repeated", field, p.key)
			}
			seen[p.key] = true
			var ok bool
			switch kinds[p.key] {
			case "nonneg":
				n, isInt := p.value.(int64)
				ok = isInt && n >= 0
			case "positive":
				n, isInt := p.value.(int64)
				ok = isInt && n > 0
			case "string":
				_, ok = p.value.(string)
			case "binary":
				_, ok = p.value.([]byte)
			default:
				ok = true // other parameters are comments
			}
			if !ok {
				return fmt.Errorf("%s: %s=%v has the wrong type or range", field, p.key, p.value)
			}
		}
		if !seen[required] {
			return fmt.Errorf("%s: item %q lacks %s", field, it.value, required)
		}
	}
	return nil
}

// A small RFC 9651 (Structured Field Values) List parser, section 4.2:
// Items with Integers, Decimals, Strings, Tokens, Byte Sequences, Booleans
// and Parameters; Inner Lists, Dates and Display Strings are refused.

// sfItem is one List member: a bare item and its parameters. Bare items
// are int64, float64, string (String), sfToken, []byte or bool.
type sfItem struct {
	value  any
	params []sfParam
}

type sfParam struct {
	key   string
	value any
}

type sfToken string

func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: strings.TrimLeft(s, " ")}
	var items []sfItem
	for p.s != "" {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.s = strings.TrimLeft(p.s, " \t")
		if p.s == "" {
			return items, nil
		}
		if p.s[0] != ',' {
			return nil, fmt.Errorf("want ',' at %q", p.s)
		}
		p.s = strings.TrimLeft(p.s[1:], " \t")
		if p.s == "" {
			return nil, errors.New("trailing comma")
		}
	}
	return items, nil
}

type sfParser struct{ s string }

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{value: v}
	for strings.HasPrefix(p.s, ";") {
		p.s = strings.TrimLeft(p.s[1:], " ")
		k, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var pv any = true
		if strings.HasPrefix(p.s, "=") {
			p.s = p.s[1:]
			if pv, err = p.bareItem(); err != nil {
				return sfItem{}, err
			}
		}
		it.params = append(it.params, sfParam{k, pv})
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	if p.s == "" || !(isLCAlpha(p.s[0]) || p.s[0] == '*') {
		return "", fmt.Errorf("bad key at %q", p.s)
	}
	i := 1
	for i < len(p.s) && (isLCAlpha(p.s[i]) || isDigit(p.s[i]) || strings.IndexByte("_-.*", p.s[i]) >= 0) {
		i++
	}
	k := p.s[:i]
	p.s = p.s[i:]
	return k, nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.s == "" {
		return nil, errors.New("missing item")
	}
	switch c := p.s[0]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token(), nil
	case c == ':':
		return p.bytes()
	case c == '?':
		if len(p.s) < 2 || (p.s[1] != '0' && p.s[1] != '1') {
			return nil, fmt.Errorf("bad boolean at %q", p.s)
		}
		b := p.s[1] == '1'
		p.s = p.s[2:]
		return b, nil
	}
	return nil, fmt.Errorf("unsupported item at %q", p.s)
}

func (p *sfParser) number() (any, error) {
	i, neg := 0, false
	if p.s[0] == '-' {
		i, neg = 1, true
	}
	start, dot := i, -1
	for ; i < len(p.s); i++ {
		c := p.s[i]
		if c == '.' && dot < 0 {
			dot = i
			continue
		}
		if !isDigit(c) {
			break
		}
	}
	num := p.s[start:i]
	p.s = p.s[i:]
	if num == "" || num[0] == '.' {
		return nil, errors.New("bad number")
	}
	if dot < 0 {
		if len(num) > 15 {
			return nil, fmt.Errorf("integer %s has more than 15 digits", num)
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if neg {
			n = -n
		}
		return n, err
	}
	whole, frac, _ := strings.Cut(num, ".")
	if len(whole) > 12 || frac == "" || len(frac) > 3 {
		return nil, fmt.Errorf("bad decimal %s", num)
	}
	f, err := strconv.ParseFloat(num, 64)
	if neg {
		f = -f
	}
	return f, err
}

func (p *sfParser) str() (any, error) {
	var b strings.Builder
	for i := 1; i < len(p.s); i++ {
		c := p.s[i]
		switch {
		case c == '\\':
			if i++; i == len(p.s) || (p.s[i] != '"' && p.s[i] != '\\') {
				return nil, errors.New("bad escape in string")
			}
			b.WriteByte(p.s[i])
		case c == '"':
			p.s = p.s[i+1:]
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, fmt.Errorf("byte %#x in string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, errors.New("unterminated string")
}

func (p *sfParser) token() sfToken {
	i := 1
	for i < len(p.s) && (isAlpha(p.s[i]) || isDigit(p.s[i]) || strings.IndexByte("!#$%&'*+-.^_`|~:/", p.s[i]) >= 0) {
		i++
	}
	t := sfToken(p.s[:i])
	p.s = p.s[i:]
	return t
}

func (p *sfParser) bytes() (any, error) {
	end := strings.IndexByte(p.s[1:], ':')
	if end < 0 {
		return nil, errors.New("unterminated byte sequence")
	}
	enc := p.s[1 : 1+end]
	p.s = p.s[end+2:]
	// Serializers must pad (RFC 9651 section 4.1.8), so the checker
	// refuses a missing '='; non-zero pad bits are tolerated, as section
	// 4.2.7 asks (the draft's own example has them).
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("byte sequence %q: %v", enc, err)
	}
	return b, nil
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || 'A' <= c && c <= 'Z' }

// ExampleSetHeaders: two limits on a login, the per-minute one denying.
func ExampleSetHeaders() {
	limits := []sluice.Limit{
		sluice.PerMinute(5).Using(sluice.SlidingWindow).Named("login-1m"),
		sluice.PerHour(20).Using(sluice.FixedWindow).Named("login-1h"),
	}
	results := []sluice.Result{ // from Limiter.AllowAll: MultiResult.Results
		{Allowed: false, Limit: 5, Remaining: 0, ResetAfter: 42 * time.Second, RetryAfter: 12 * time.Second},
		{Allowed: true, Limit: 20, Remaining: 15, ResetAfter: 1800 * time.Second},
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := http.Header{}
	httplimit.SetHeaders(h, httplimit.HeadersBoth, limits, results, 0, now, nil)
	// login-1m's q is 4: sliding_window sustains Limit-1 per Period evenly.
	for _, f := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		fmt.Printf("%s: %s\n", f, h.Get(f))
	}
	// Output:
	// RateLimit-Policy: "login-1m";q=4;w=60, "login-1h";q=20;w=3600
	// RateLimit: "login-1m";r=0;t=12, "login-1h";r=15;t=1800
	// X-RateLimit-Limit: 5
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 1767225642
}

// hugeLimit is sluice.MaxLimit, held in an int64 so that the test still
// compiles where int has 32 bits (GOARCH=386 vet), MaxLimit overflowing it.
var hugeLimit int64 = sluice.MaxLimit
