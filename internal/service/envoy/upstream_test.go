//go:build integration

package envoy

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
)

// The conformance suite: the files of testdata/upstream, loaded as one
// directory, and the whole responses envoyproxy/ratelimit
// (v1.4.1-0.20260122083618-3fb702589d36) gives to each request, compared
// as its own tests compare them (proto.Equal), over gRPC, on a real
// redis-server and on the memory store. Every expectation below is what
// upstream answers, worked out from its code (src/service/ratelimit.go,
// src/limiter/base_limiter.go, src/config/config_impl.go); where sluice
// deliberately differs, the case says so.

// upstreamNow is the instant of every decision: 10.25s into a minute, so
// that duration_until_reset is upstream's unit - now%unit in whole Unix
// seconds.
var upstreamNow = time.Date(2026, 3, 4, 5, 6, 10, 250e6, time.UTC)

type conformance struct {
	t      *testing.T
	client rlsv3.RateLimitServiceClient
	// live is set for a server on the real clock (envoyproxy/ratelimit
	// itself): duration_until_reset is then checked against the clock at
	// the call, to the second, rather than against upstreamNow.
	live bool
}

// startConformance serves testdata/upstream from store on a loopback port.
func startConformance(t *testing.T, store sluice.Store, opts ...ServiceOption) *conformance {
	t.Helper()
	cfg, err := LoadConfig("testdata/upstream")
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return upstreamNow }
	opts = append([]ServiceOption{WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	svc := NewService(sluice.New(store, sluice.WithClock(now)), cfg, opts...)
	svc.now = now
	return &conformance{t: t, client: serve(t, svc)}
}

// ask sends one request and fails the test unless the response equals want.
func (c *conformance) ask(what string, want *rlsv3.RateLimitResponse, domain string, hits uint32, ds ...*commonv3.RateLimitDescriptor) {
	c.t.Helper()
	if c.live {
		// Clear of a window's end, so that a request and the one before
		// it count in the same second (and the suite in one minute).
		if ns := time.Now().Nanosecond(); ns > 800e6 {
			time.Sleep(time.Duration(1e9-ns) + 20*time.Millisecond)
		}
	}
	before := time.Now()
	got, err := c.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
	if c.live {
		got, want = proto.Clone(got).(*rlsv3.RateLimitResponse), proto.Clone(want).(*rlsv3.RateLimitResponse)
		if err := liveResets(got, want, before, time.Now()); err != nil {
			c.t.Fatalf("%s: %v\n got %v", what, err, got)
		}
	}
	if !proto.Equal(got, want) {
		c.t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
	}
}

// liveResets checks the duration_until_reset of every status of got, made
// between from and to on the real clock, against its unit's window as
// upstream computes it (unit - now%unit, in whole Unix seconds), and
// sets got's to want's when it is right: a status has one exactly when
// want's has one.
func liveResets(got, want *rlsv3.RateLimitResponse, from, to time.Time) error {
	if len(got.Statuses) != len(want.Statuses) {
		return nil // proto.Equal reports it
	}
	for i, st := range got.Statuses {
		w := want.Statuses[i]
		if (st.DurationUntilReset == nil) != (w.DurationUntilReset == nil) || st.DurationUntilReset == nil {
			continue
		}
		d := unitSeconds[st.GetCurrentLimit().GetUnit()]
		if m := st.GetCurrentLimit().GetUnitMultiplier().GetValue(); m > 1 {
			d *= int64(m)
		}
		s, right := st.DurationUntilReset.Seconds, false
		for u := from.Unix(); u <= to.Unix() && d > 0; u++ {
			right = right || s == d-u%d
		}
		if !right {
			return fmt.Errorf("status %d: duration_until_reset %ds, want the end of the current %ds window, between %s and %s", i, s, d, from.Format(time.StampMilli), to.Format(time.StampMilli))
		}
		st.DurationUntilReset = w.DurationUntilReset
	}
	return nil
}

// resp is a response of statuses, OVER_LIMIT if any is.
func resp(sts ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	r := &rlsv3.RateLimitResponse{OverallCode: OK, Statuses: sts}
	for _, st := range sts {
		if st.Code == OVER {
			r.OverallCode = OVER
		}
	}
	return r
}

// unitSeconds is upstream's utils.UnitToDivider.
var unitSeconds = map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{
	rlsv3.RateLimitResponse_RateLimit_SECOND: 1, rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
	rlsv3.RateLimitResponse_RateLimit_HOUR: 3600, rlsv3.RateLimitResponse_RateLimit_DAY: 86400,
	rlsv3.RateLimitResponse_RateLimit_WEEK: 7 * 86400, rlsv3.RateLimitResponse_RateLimit_MONTH: 30 * 86400,
	rlsv3.RateLimitResponse_RateLimit_YEAR: 365 * 86400,
}

// reset is upstream's utils.CalculateReset at upstreamNow.
func reset(u rlsv3.RateLimitResponse_RateLimit_Unit) *durationpb.Duration {
	d := unitSeconds[u]
	return &durationpb.Duration{Seconds: d - upstreamNow.Unix()%d}
}

// limited is a status with a current limit, as upstream's
// generateResponseDescriptorStatus makes it.
func limited(code rlsv3.RateLimitResponse_Code, name string, rpu uint32, u rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: u},
		LimitRemaining:     remaining,
		DurationUntilReset: reset(u),
	}
}

func ok() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: OK}
}

// withHits is d with its own hits_addend.
func withHits(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
	month  = rlsv3.RateLimitResponse_RateLimit_MONTH
	year   = rlsv3.RateLimitResponse_RateLimit_YEAR
)

// conformanceStores runs f on a fresh memory store and a fresh Redis.
func conformanceStores(t *testing.T, f func(t *testing.T, store sluice.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, memory.New()) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		store, err := redis.Open("redis://" + srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		f(t, store)
	})
}

func TestUpstreamConformance(t *testing.T) {
	conformanceStores(t, func(t *testing.T, store sluice.Store) {
		runConformance(startConformance(t, store))
	})
}

// runConformance asks c every case of the suite, in order, on counts
// nothing else spends.
func runConformance(c *conformance) {
	c.t.Helper()

	// An unknown domain: OK, one OK status per descriptor.
	c.ask("unknown domain", resp(ok(), ok()), "foo", 1, desc("hello", "world"), desc("a", "b"))
	// A descriptor that matches nothing, and one without entries.
	c.ask("no match", resp(ok(), ok()), "basic", 1, desc("nothing", "here"), desc())

	c.ask("basic", resp(limited(OK, "", 50, second, 49)), "basic", 1, desc("key1", "foo"))
	for i := range 25 {
		code, left := OK, uint32(19-i)
		if i >= 20 {
			code, left = OVER, 0
		}
		c.ask("key2 request "+strconv.Itoa(i), resp(limited(code, "", 20, minute, left)), "another", 1, desc("key2", "r1"))
	}
	// Two descriptors are independent: key2 keeps counting while key3
	// is over the limit (upstream's default,
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false).
	for i := range 15 {
		k3, left3 := OK, uint32(9-i)
		if i >= 10 {
			k3, left3 = OVER, 0
		}
		c.ask("key2+key3 request "+strconv.Itoa(i), resp(limited(OK, "", 20, minute, uint32(19-i)), limited(k3, "", 10, minute, left3)),
			"another", 1, desc("key2", "r2"), desc("key3", "r2"))
	}

	// requests_per_unit 0: over the limit, except a check of cost 0
	// (asked first: upstream counts the request it denies, after which a
	// check is over the limit too).
	c.ask("blocked, hits_addend 0", resp(limited(OK, "", 0, hour, 0)), "basic", 1, withHits(desc("blocked", "x"), 0))
	c.ask("blocked", resp(limited(OVER, "", 0, hour, 0)), "basic", 1, desc("blocked", "x"))
	// Unlimited: OK, everything remaining, no current limit.
	unlimited := &rlsv3.RateLimitResponse_DescriptorStatus{Code: OK, LimitRemaining: math.MaxUint32}
	c.ask("unlimited", resp(unlimited), "basic", 1, desc("open", "x"))
	c.ask("named", resp(limited(OK, "named-limit", 3, day, 2)), "basic", 1, desc("named", "x"))
	c.ask("month", resp(limited(OK, "", 2, month, 1)), "basic", 1, desc("monthly", "x"))
	c.ask("year", resp(limited(OK, "", 2, year, 1)), "basic", 1, desc("yearly", "x"))
	c.ask("detailed_metric", resp(limited(OK, "", 5, second, 4)), "basic", 1, desc("metered", "x"))

	// hits_addend: a descriptor's own, 0 included, wins over the
	// request's, whose 0 means 1.
	c.ask("check only", resp(limited(OK, "", 1, minute, 1)), "basic", 5, withHits(desc("one_per_minute", "a"), 0))
	c.ask("check only again", resp(limited(OK, "", 1, minute, 1)), "basic", 5, withHits(desc("one_per_minute", "a"), 0))
	c.ask("request hits_addend 0 counts 1", resp(limited(OK, "", 1, minute, 0)), "basic", 0, desc("one_per_minute", "a"))
	c.ask("then over", resp(limited(OVER, "", 1, minute, 0)), "basic", 0, desc("one_per_minute", "a"))
	c.ask("request hits_addend", resp(limited(OK, "", 50, second, 47)), "basic", 3, desc("key1", "h"))
	c.ask("descriptor hits_addend", resp(limited(OK, "", 50, second, 37)), "basic", 3, withHits(desc("key1", "h"), 10))

	// shadow_mode: over the limit, reported OK with its numbers.
	c.ask("shadow 1", resp(limited(OK, "", 1, minute, 0)), "another", 1, desc("shadow", "x"))
	c.ask("shadow 2", resp(limited(OK, "", 1, minute, 0)), "another", 1, desc("shadow", "x"))
	// quota_mode: OK with current_limit and limit_remaining, no
	// duration_until_reset, and overall_code untouched...
	c.ask("quota 1", resp(limited(OK, "", 1, minute, 0)), "another", 1, desc("quota", "x"))
	quota := &rlsv3.RateLimitResponse_DescriptorStatus{Code: OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1, Unit: minute}}
	c.ask("quota 2", resp(quota), "another", 1, desc("quota", "x"))
	// ...while another descriptor over the limit still makes it
	// OVER_LIMIT.
	c.ask("quota and over", resp(quota, limited(OVER, "", 10, minute, 0)), "another", 1, desc("quota", "x"), desc("key3", "r2"))

	// share_threshold: every value of the wildcard shares one count.
	c.ask("shared/a", resp(limited(OK, "", 2, minute, 1)), "files", 1, desc("path", "shared/a"))
	c.ask("shared/b", resp(limited(OK, "", 2, minute, 0)), "files", 1, desc("path", "shared/b"))
	c.ask("shared/c", resp(limited(OVER, "", 2, minute, 0)), "files", 1, desc("path", "shared/c"))
	// Without it, each value has its own.
	c.ask("own/a", resp(limited(OK, "", 2, minute, 1)), "files", 1, desc("path", "own/a"))
	c.ask("own/b", resp(limited(OK, "", 2, minute, 1)), "files", 1, desc("path", "own/b"))
	// A shared wildcard above the limit: b1 and b2 share, per op.
	c.ask("b1 get", resp(limited(OK, "", 1, minute, 0)), "files", 1, desc("bucket", "b1", "op", "get"))
	c.ask("b2 get", resp(limited(OVER, "", 1, minute, 0)), "files", 1, desc("bucket", "b2", "op", "get"))
	c.ask("b1 put", resp(limited(OK, "", 1, minute, 0)), "files", 1, desc("bucket", "b1", "op", "put"))

	// replaces: the replaced limit is neither decided nor counted.
	c.ask("read replaced", resp(ok(), limited(OK, "", 5, minute, 4)), "tiers", 1, desc("category", "read"), desc("endpoint", "/special"))
	c.ask("read alone", resp(limited(OK, "read", 2, minute, 1)), "tiers", 1, desc("category", "read"))
	// A limit applies only where the request's last entry ends.
	c.ask("too short", resp(ok()), "tiers", 1, desc("nested", "a"))
	c.ask("nested", resp(limited(OK, "", 3, second, 2)), "tiers", 1, desc("nested", "a", "leaf", "x"))
	c.ask("too long", resp(ok()), "tiers", 1, desc("nested", "a", "leaf", "x", "extra", "1"))

	// A limit override: its numbers, no name, whether or not a node
	// matches.
	over := desc("anything", "x")
	over.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}
	c.ask("override", resp(limited(OK, "", 3, minute, 2)), "basic", 1, over)
}

// headerValues returns a response's headers as a map.
func headerValues(r *rlsv3.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, hv := range r.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	return h
}

// TestUpstreamHeaders: off by default; with HeadersRateLimit, upstream's
// LIMIT_RESPONSE_HEADERS_ENABLED fields of the most restrictive
// descriptor; with HeadersIETF, one distinct item per descriptor.
func TestUpstreamHeaders(t *testing.T) {
	conformanceStores(t, func(t *testing.T, store sluice.Store) {
		call := func(c *conformance, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
			t.Helper()
			r, err := c.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "another", Descriptors: ds})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		if r := call(startConformance(t, store), desc("key2", "a")); len(r.ResponseHeadersToAdd) != 0 {
			t.Errorf("headers by default: %v", r.ResponseHeadersToAdd)
		}

		c := startConformance(t, store, WithHeaders(HeadersRateLimit))
		minuteReset := strconv.FormatInt(reset(minute).Seconds, 10)
		// The least remaining: key3 (10 per minute) over key2 (20).
		r := call(c, desc("key2", "h"), desc("key3", "h"))
		want := []*corev3.HeaderValue{{Key: "RateLimit-Limit", Value: "10"}, {Key: "RateLimit-Remaining", Value: "9"}, {Key: "RateLimit-Reset", Value: minuteReset}}
		if !equalHeaders(r.ResponseHeadersToAdd, want) {
			t.Errorf("ratelimit headers: %v, want %v", r.ResponseHeadersToAdd, want)
		}
		// Over the limit, the last descriptor over it, whatever remains
		// elsewhere; a descriptor without a limit adds nothing.
		call(c, desc("shadow", "h"))
		r = call(c, desc("key3", "h"), desc("shadow", "h"), desc("nothing", "h"))
		if h := headerValues(r); h["RateLimit-Limit"] != "1" || h["RateLimit-Remaining"] != "0" {
			t.Errorf("shadow over the limit, most restrictive: %v", h)
		}
		renamed := startConformance(t, store, WithHeaders(HeadersRateLimit), WithHeaderNames("X-Limit", "", "X-Reset"))
		if h := headerValues(call(renamed, desc("key2", "n"))); h["X-Limit"] != "20" || h["RateLimit-Remaining"] == "" || h["X-Reset"] != minuteReset {
			t.Errorf("renamed: %v", h)
		}

		ietf := startConformance(t, store, WithHeaders(HeadersIETF))
		h := headerValues(call(ietf, desc("key2", "i1"), desc("key2", "i2")))
		if want := `"another.key2";r=19;t=50, "another.key2-2";r=19;t=50`; h["RateLimit"] != want {
			t.Errorf("RateLimit = %q, want %q", h["RateLimit"], want)
		}
		if want := `"another.key2";q=20;w=60, "another.key2-2";q=20;w=60`; h["RateLimit-Policy"] != want {
			t.Errorf("RateLimit-Policy = %q, want %q", h["RateLimit-Policy"], want)
		}
	})
}

func equalHeaders(a, b []*corev3.HeaderValue) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
