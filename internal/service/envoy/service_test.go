package envoy

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type fixture struct {
	client rlsv3.RateLimitServiceClient
	svc    *Service
	clock  *clock
}

// start serves the fixtures on a loopback port; the clock starts 250ms
// into a second (and into a day).
func start(t *testing.T, opts ...ServiceOption) *fixture {
	t.Helper()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 250e6, time.UTC)}
	lim := sluice.New(memory.New(), sluice.WithClock(clk.Now))
	opts = append([]ServiceOption{WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	svc := NewService(lim, mustLoad(t, "database.yaml", "messaging.yaml", "edge.yaml", "features.yaml"), opts...)
	svc.now = clk.Now
	return &fixture{client: serve(t, svc), svc: svc, clock: clk}
}

// serve serves svc on a loopback port until the test ends and returns a
// client connected to it.
func serve(t *testing.T, svc rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceClient {
	t.Helper()
	return rlsv3.NewRateLimitServiceClient(dial(t, svc))
}

// dial serves svc on a loopback port until the test ends and returns a
// connection to it.
func dial(t *testing.T, svc rlsv3.RateLimitServiceServer) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	Register(g, svc)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (f *fixture) call(t *testing.T, domain string, hits uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := f.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestOKThenOverLimit(t *testing.T) {
	f := start(t)
	for i := range 3 {
		r := f.call(t, "mongo_cps", 0, desc("database", "default"))
		if r.OverallCode != OK {
			t.Fatalf("request %d: %v", i, r.OverallCode)
		}
		st := r.Statuses[0]
		cl := st.CurrentLimit
		if st.Code != OK || cl.RequestsPerUnit != 3 || cl.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND ||
			cl.Name != "" || st.LimitRemaining != uint32(2-i) ||
			st.DurationUntilReset.AsDuration() != time.Second { // 750ms, in whole seconds rounded up
			t.Fatalf("request %d: status %v", i, st)
		}
	}
	r := f.call(t, "mongo_cps", 0, desc("database", "default"))
	if r.OverallCode != OVER || r.Statuses[0].Code != OVER || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("4th request: %v", r)
	}
	f.clock.Add(750 * time.Millisecond) // next window
	if r := f.call(t, "mongo_cps", 0, desc("database", "default")); r.OverallCode != OK {
		t.Fatalf("next window: %v", r)
	}
	// An unmatched descriptor is OK with no current limit.
	r = f.call(t, "mongo_cps", 0, desc("database", "other"))
	if r.OverallCode != OK || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unmatched: %v", r)
	}
}

func TestWildcardAndExact(t *testing.T) {
	f := start(t)
	// 50.0.0.5 has its own limit of 1; other addresses 3 each, separately.
	if r := f.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5")); r.OverallCode != OK {
		t.Fatal(r)
	}
	if r := f.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5")); r.OverallCode != OVER {
		t.Fatal(r)
	}
	for _, ip := range []string{"1.1.1.1", "2.2.2.2"} {
		for i := range 4 {
			r := f.call(t, "edge_proxy_per_ip", 0, desc("remote_address", ip))
			if want := map[bool]rlsv3.RateLimitResponse_Code{true: OK, false: OVER}[i < 3]; r.OverallCode != want {
				t.Fatalf("%s request %d: %v", ip, i, r)
			}
			if cl := r.Statuses[0].CurrentLimit; cl.RequestsPerUnit != 3 || cl.Name != "" { // the file names no limit
				t.Fatal(r)
			}
		}
	}
	// Prefix value: 2 per minute for the subnet, per address.
	for i := range 3 {
		r := f.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "192.168.0.1"))
		if (r.OverallCode == OK) != (i < 2) || r.Statuses[0].CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("prefix request %d: %v", i, r)
		}
	}
}

func TestNestedAndMultipleDescriptors(t *testing.T) {
	f := start(t)
	mk := desc("message_type", "marketing", "to_number", "555")
	all := desc("to_number", "555")
	// Both descriptors are decided in order; marketing allows 2 a day.
	for i := range 3 {
		r := f.call(t, "messaging", 0, mk, all)
		if len(r.Statuses) != 2 || r.Statuses[1].Code != OK {
			t.Fatalf("request %d: %v", i, r)
		}
		if (r.Statuses[0].Code == OK) != (i < 2) || (r.OverallCode == OK) != (i < 2) {
			t.Fatalf("request %d: %v", i, r)
		}
		if r.Statuses[0].CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_DAY {
			t.Fatal(r)
		}
	}
	// The general limit counted all three (each descriptor independently).
	r := f.call(t, "messaging", 0, all)
	if r.OverallCode != OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatal(r)
	}
	if r := f.call(t, "messaging", 0, all); r.OverallCode != OVER {
		t.Fatal(r)
	}
	// Another number has its own counters.
	if r := f.call(t, "messaging", 0, desc("to_number", "666")); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 3 {
		t.Fatal(r)
	}
}

func TestUnlimitedShadowBlocked(t *testing.T) {
	f := start(t)
	for range 10 {
		r := f.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "10.0.0.1"))
		if r.OverallCode != OK || r.Statuses[0].CurrentLimit != nil || r.Statuses[0].LimitRemaining != 1<<32-1 {
			t.Fatal(r)
		}
	}
	for i := range 3 {
		r := f.call(t, "api", 0, desc("path", "/shadow"))
		if r.OverallCode != OK || r.Statuses[0].Code != OK || r.Statuses[0].CurrentLimit.RequestsPerUnit != 1 {
			t.Fatalf("shadow request %d: %v", i, r)
		}
	}
	r := f.call(t, "api", 0, desc("path", "/blocked"))
	if r.OverallCode != OVER || r.Statuses[0].LimitRemaining != 0 || r.Statuses[0].DurationUntilReset.AsDuration() != time.Hour {
		t.Fatal(r)
	}
}

func TestHitsAddend(t *testing.T) {
	f := start(t)
	r := f.call(t, "mongo_cps", 4, desc("database", "users"))
	if r.OverallCode != OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatal(r)
	}
	if r := f.call(t, "mongo_cps", 2, desc("database", "users")); r.OverallCode != OVER || r.Statuses[0].LimitRemaining != 1 {
		t.Fatal(r)
	}
	// More than the limit could ever admit: over the limit, nothing consumed.
	if r := f.call(t, "mongo_cps", 9, desc("database", "users")); r.OverallCode != OVER || r.Statuses[0].LimitRemaining != 1 {
		t.Fatal(r)
	}
	// A descriptor's own hits_addend wins over the request's.
	d := desc("database", "users")
	d.HitsAddend = wrapperspb.UInt64(1)
	if r := f.call(t, "mongo_cps", 7, d); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatal(r)
	}
}

// TestRulesHitsAddend: in RulesService too, a hits_addend above what a
// limit can ever admit is OVER_LIMIT, consuming nothing, not an error
// (which Envoy, failing open by default, would admit); a descriptor's own
// hits_addend overrides the request's, and an explicit 0 only looks.
func TestRulesHitsAddend(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	svc, _ := rulesService(t, sluice.New(memory.New(), sluice.WithClock(clk.Now)), `
rules:
  - name: login
    key: ip
    limits:
      - {limit: 10, period: 1s}
      - {limit: 2, period: 1m}
`)
	fx := &fixture{client: serve(t, svc)}
	over := func(r *rlsv3.RateLimitResponse) bool {
		return r.OverallCode == OVER && len(r.Statuses) == 1 && r.Statuses[0].Code == OVER
	}
	if r := fx.call(t, "edge", 3, desc("rule", "login", "remote_address", "192.0.2.9")); !over(r) {
		t.Errorf("hits_addend 3 of 2: %v, want OVER_LIMIT", r)
	}
	d := desc("rule", "login", "remote_address", "192.0.2.9")
	d.HitsAddend = wrapperspb.UInt64(3)
	if r := fx.call(t, "edge", 0, d); !over(r) {
		t.Errorf("descriptor hits_addend 3 of 2: %v, want OVER_LIMIT", r)
	}
	// The descriptor's own hits_addend wins over the request's, and 0
	// reports the state without spending: nothing was consumed above.
	d = desc("rule", "login", "remote_address", "192.0.2.9")
	d.HitsAddend = wrapperspb.UInt64(0)
	if r := fx.call(t, "edge", 3, d); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 2 {
		t.Errorf("descriptor hits_addend 0 under the request's 3: %v, want OK, 2 remaining", r)
	}
	if r := fx.call(t, "edge", 2, desc("rule", "login", "remote_address", "192.0.2.9")); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("cost 2 after the refusals: %v, want OK, 0 remaining", r)
	}
}

func TestAlgorithmAndMultiplier(t *testing.T) {
	f := start(t)
	// token_bucket 60/min: a full bucket of 60, then one token a second.
	r := f.call(t, "api", 60, desc("path", "/bucket"))
	if r.OverallCode != OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatal(r)
	}
	if r := f.call(t, "api", 0, desc("path", "/bucket")); r.OverallCode != OVER {
		t.Fatal(r)
	}
	f.clock.Add(time.Second)
	if r := f.call(t, "api", 0, desc("path", "/bucket")); r.OverallCode != OK {
		t.Fatal(r)
	}
	r = f.call(t, "api", 0, desc("client", "acme", "path", "/upload"))
	cl := r.Statuses[0].CurrentLimit
	if cl.Name != "upload" || cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || cl.UnitMultiplier.GetValue() != 2 || r.Statuses[0].LimitRemaining != 3 {
		t.Fatal(r)
	}
}

func TestLimitOverride(t *testing.T) {
	f := start(t)
	d := desc("anything", "x")
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	if r := f.call(t, "api", 0, d); r.OverallCode != OK || r.Statuses[0].CurrentLimit.RequestsPerUnit != 1 {
		t.Fatal(r)
	}
	if r := f.call(t, "api", 0, d); r.OverallCode != OVER {
		t.Fatal(r)
	}
}

// TestOverrideLabel: the observer labels limit overrides by domain, not
// by the request's values, so that metrics keep one series per domain
// rather than one per client; each client still has its own counter.
func TestOverrideLabel(t *testing.T) {
	var (
		mu     sync.Mutex
		labels []string
	)
	f := start(t, WithObserver(func(rule, _ string, _ policy.Outcome) {
		mu.Lock()
		labels = append(labels, rule)
		mu.Unlock()
	}))
	for _, ip := range []string{"1.1.1.1", "2.2.2.2"} {
		d := desc("remote_address", ip)
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
		if r := f.call(t, "api", 0, d); r.OverallCode != OK {
			t.Fatalf("%s: %v, want OK (a counter of its own)", ip, r)
		}
	}
	f.call(t, "mongo_cps", 0, desc("database", "default"))
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"override.api", "override.api", "mongo_cps.database_default"}; !slices.Equal(labels, want) {
		t.Errorf("observed labels %q, want %q", labels, want)
	}
}

// TestLabels: Config.Labels lists every label the observer is told of,
// those of overrides included, so that metrics can show their series
// from the start.
func TestLabels(t *testing.T) {
	var (
		mu       sync.Mutex
		observed []string
	)
	f := start(t, WithObserver(func(rule, _ string, _ policy.Outcome) {
		mu.Lock()
		observed = append(observed, rule)
		mu.Unlock()
	}))
	o := desc("remote_address", "1.1.1.1")
	o.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	f.call(t, "api", 0, o)
	f.call(t, "mongo_cps", 0, desc("database", "default"))
	labels := f.svc.Config().Labels()
	mu.Lock()
	defer mu.Unlock()
	if len(observed) != 2 {
		t.Fatalf("observed %q, want two labels", observed)
	}
	for _, l := range observed {
		if !slices.Contains(labels, l) {
			t.Errorf("observed label %q is not in Labels() %q", l, labels)
		}
	}
	if n := len(f.svc.Config().Limits()) + len(f.svc.Config().Domains); len(labels) != n {
		t.Errorf("Labels() has %d labels, want %d (one per limit and per domain)", len(labels), n)
	}
}

func TestInvalidArgument(t *testing.T) {
	f := start(t)
	cases := []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}}, "domain must not be empty"},
		{&rlsv3.RateLimitRequest{Domain: "api"}, "descriptor list must not be empty"},
		{&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: desc("a", "b").Entries,
			Limit:   &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_UNKNOWN},
		}}}, "limit override unit UNKNOWN is not supported"},
	}
	for _, tc := range cases {
		_, err := f.client.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%v: got %v, want InvalidArgument %q", tc.req, err, tc.want)
		}
	}
	// An invalid override fails the request before any descriptor counts.
	bad := &commonv3.RateLimitDescriptor{Entries: desc("a", "b").Entries, Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}
	for range 5 {
		if _, err := f.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*commonv3.RateLimitDescriptor{desc("database", "default"), bad}}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("bad override: %v", err)
		}
	}
	if r := f.call(t, "mongo_cps", 0, desc("database", "default")); r.Statuses[0].LimitRemaining != 2 {
		t.Errorf("a refused request counted: %v", r)
	}
}

func TestResponseHeaders(t *testing.T) {
	f := start(t, WithHeaders(HeadersIETF))
	r := f.call(t, "mongo_cps", 0, desc("database", "default"), desc("database", "users"), desc("database", "none"))
	h := map[string]string{}
	for _, hv := range r.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	if got, want := h["RateLimit-Policy"], `"mongo_cps.database_default";q=3;w=1, "mongo_cps.database_users";q=5;w=1`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got, want := h["RateLimit"], `"mongo_cps.database_default";r=2;t=1, "mongo_cps.database_users";r=4;t=1`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	// Without the option, no headers.
	g := start(t)
	if r := g.call(t, "mongo_cps", 0, desc("database", "default")); len(r.ResponseHeadersToAdd) != 0 {
		t.Error(r.ResponseHeadersToAdd)
	}
}

func TestUpdate(t *testing.T) {
	f := start(t)
	c, err := ParseConfig("new.yaml", []byte("domain: mongo_cps\ndescriptors:\n  - key: database\n    value: default\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.svc.Update(c)
	if f.svc.cfg.Load().cfg != c {
		t.Fatal("configuration in use after Update is not the new one")
	}
	f.call(t, "mongo_cps", 0, desc("database", "default"))
	if r := f.call(t, "mongo_cps", 0, desc("database", "default")); r.OverallCode != OVER {
		t.Fatal(r)
	}
	// A domain the new configuration lacks is unknown: OK, unlimited.
	if r := f.call(t, "api", 0, desc("path", "/blocked")); r.OverallCode != OK || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("domain removed by Update still limited: %v", r)
	}
}

// TestUnknownDomainReported: every request for an unknown domain is
// counted; each domain is logged once per configuration, at most
// maxLoggedDomains of them.
func TestUnknownDomainReported(t *testing.T) {
	var logged strings.Builder
	var counted []string
	f := start(t, WithLogger(slog.New(slog.NewTextHandler(&logged, nil))), WithUnknownDomain(func(d string) { counted = append(counted, d) }))
	for range 3 {
		f.call(t, "nope", 0, desc("a", "b"))
	}
	f.call(t, "mongo_cps", 0, desc("database", "users"))
	if len(counted) != 3 || counted[0] != "nope" || strings.Count(logged.String(), "domain=nope") != 1 {
		t.Fatalf("counted %q, logged %q; want 3 counted and one line", counted, logged.String())
	}
	f.svc.Update(f.svc.cfg.Load().cfg)
	f.call(t, "nope", 0, desc("a", "b"))
	if n := strings.Count(logged.String(), "domain=nope"); n != 2 {
		t.Errorf("after Update, %d lines for the domain, want 2", n)
	}
	for i := range maxLoggedDomains + 10 {
		f.call(t, "d"+strconv.Itoa(i), 0, desc("a", "b"))
	}
	if n := strings.Count(logged.String(), "\n"); n != 1+maxLoggedDomains {
		t.Errorf("%d lines logged, want %d: nope before the Update, then nope and the first %d others", n, 1+maxLoggedDomains, maxLoggedDomains-1)
	}
}
