package envoy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/service/server"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// compile returns the rules of a policy file, compiled.
func compile(t *testing.T, yaml string) *policy.RuleSet {
	t.Helper()
	f, err := config.Parse("sluice.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// rulesService returns a RulesService deciding with lim under the rules
// of yaml, and its engine.
func rulesService(t *testing.T, lim *sluice.Limiter, yaml string) (*RulesService, *policy.Engine) {
	t.Helper()
	e := policy.New(lim, compile(t, yaml), policy.WithLogger(slog.New(slog.DiscardHandler)))
	return NewRulesService(e), e
}

// TestRulesService: Envoy descriptors name sluice rules with a "rule"
// entry and the client with the others.
func TestRulesService(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	svc, _ := rulesService(t, sluice.New(memory.New(), sluice.WithClock(clk.Now)), `
rules:
  - name: login
    match: POST /login
    key: ip
    limit: 2
    period: 1m
    algorithm: sliding_window
    plans:
      - {name: vip, keys: [10.0.0.1], limit: 5, period: 1m}
  - {name: probe, key: ip, limit: 1, period: 1h, shadow: true}
  - {name: tenants, key: request, limit: 1, period: 1h}
`)
	fx := &fixture{client: serve(t, svc)}

	login := func(addr string) *rlsv3.RateLimitResponse {
		return fx.call(t, "edge", 0, desc("rule", "login", "remote_address", addr))
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{OK, OK, OVER} {
		resp := login("203.0.113.7")
		st := resp.Statuses[0]
		if resp.OverallCode != want || st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
			st.CurrentLimit.GetName() != "login-1m (sliding_window 2/1m0s)" {
			t.Fatalf("login %d: %v %v, want %v with 2 per minute", i+1, resp.OverallCode, st, want)
		}
	}
	if got := login("198.51.100.1").OverallCode; got != OK {
		t.Errorf("another client: %v, want OK", got)
	}
	// The plan's client gets 5.
	for i := range 5 {
		if got := login("10.0.0.1"); got.OverallCode != OK || got.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
			t.Fatalf("vip login %d: %v", i+1, got)
		}
	}
	// hits_addend is the cost.
	if got := fx.call(t, "edge", 2, desc("rule", "login", "remote_address", "192.0.2.9")).OverallCode; got != OK {
		t.Errorf("cost 2: %v", got)
	}
	if got := login("192.0.2.9").OverallCode; got != OVER {
		t.Errorf("after cost 2 of 2: %v, want OVER_LIMIT", got)
	}
	// Shadow rules report OK.
	for range 3 {
		if got := fx.call(t, "edge", 0, desc("rule", "probe", "remote_address", "192.0.2.1")).OverallCode; got != OK {
			t.Errorf("shadow rule: %v, want OK", got)
		}
	}
	// A rule keyed by request takes what the descriptor names: one entry
	// (generic_key, request_headers) or several, each its own client.
	for _, d := range [][]string{{"tenant", "t1"}, {"tenant", "t2"}, {"tenant", "t1", "user", "u1"}} {
		for i, want := range []rlsv3.RateLimitResponse_Code{OK, OVER} {
			if got := fx.call(t, "edge", 0, desc(append([]string{"rule", "tenants"}, d...)...)).OverallCode; got != want {
				t.Errorf("tenants %v, request %d: %v, want %v", d, i+1, got, want)
			}
		}
	}
	// Mistakes are InvalidArgument, saying what is wrong.
	for _, tt := range []struct {
		d    []string
		says string
	}{
		{[]string{"remote_address", "1.2.3.4"}, `no "rule" entry`},
		{[]string{"rule", "nope", "remote_address", "1.2.3.4"}, `unknown rule "nope"`},
		{[]string{"rule", "login", "remote_address", "somewhere"}, `rule "login" is keyed by ip, and "somewhere" is not an IP address; write key: request for keys your callers name`},
		{[]string{"rule", "login"}, `rule "login" is keyed by ip and needs a key`},
		{[]string{"rule", "tenants"}, `rule "tenants" is keyed by request and needs a key`},
		// Several client entries make one key of their own, which no ip
		// rule could yield.
		{[]string{"rule", "login", "remote_address", "1.2.3.4", "user", "ann"}, `a composite key names no single address; write key: request for keys your callers name`},
	} {
		_, err := fx.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc(tt.d...)}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%v: %v, want InvalidArgument saying %s", tt.d, err, tt.says)
		}
	}
}

// TestReplaces: a matched limit that replaces another by name turns it off
// for the request, as in envoyproxy/ratelimit.
func TestReplaces(t *testing.T) {
	cfg, err := ParseConfig("replaces.yaml", []byte(`
domain: api
descriptors:
  - key: client
    rate_limit: {name: per_client, unit: hour, requests_per_unit: 1}
  - key: plan
    value: premium
    rate_limit:
      unit: hour
      requests_per_unit: 3
      replaces: [{name: per_client}]
`))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	svc := NewService(sluice.New(memory.New(), sluice.WithClock(clk.Now)), cfg)
	ask := func(ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// A premium client: the per-client hourly limit of 1 is replaced by 3.
	for i, want := range []rlsv3.RateLimitResponse_Code{OK, OK, OK, OVER} {
		resp := ask(desc("client", "acme"), desc("plan", "premium"))
		if resp.OverallCode != want || resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("premium request %d: %v %v, want %v with the per-client limit off", i+1, resp.OverallCode, resp.Statuses, want)
		}
	}
	// Without the premium descriptor the per-client limit applies: it was
	// never counted above.
	if a, b := ask(desc("client", "acme")).OverallCode, ask(desc("client", "acme")).OverallCode; a != OK || b != OVER {
		t.Errorf("plain client: %v then %v, want OK then OVER_LIMIT", a, b)
	}
}

// TestRulesServiceNilAndCopy: an engine without rules makes every
// descriptor InvalidArgument (unknown rule), its Update swaps the rules
// the service decides under, and the compiled rules are the engine's own
// copy, so that the caller changing its File changes nothing.
func TestRulesServiceNilAndCopy(t *testing.T) {
	e := policy.New(sluice.New(memory.New()), nil)
	svc := NewRulesService(e)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "remote_address", "192.0.2.1")}}
	if _, err := svc.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `unknown rule "login"`) {
		t.Errorf("no rules: %v, want InvalidArgument, unknown rule", err)
	}
	f, err := config.Parse("sluice.yaml", []byte("rules:\n  - {name: login, key: ip, limit: 1, period: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	e.Update(set)
	f.Rules[0].Shadow = true // the caller's copy, not the engine's
	f.Rules[0].Limits[0].Limit = 5
	for i, want := range []rlsv3.RateLimitResponse_Code{OK, OVER} {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil || resp.OverallCode != want {
			t.Fatalf("request %d: %v, %v; want %v", i+1, resp, err, want)
		}
	}
	e.Update(nil)
	if _, err := svc.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("after Update(nil): %v, want InvalidArgument", err)
	}
}

// TestRulesServiceNamesLimits: rules built in code get their limits named
// as a policy file names them, as Envoy's current_limit shows, and the
// caller's rules are left unnamed.
func TestRulesServiceNamesLimits(t *testing.T) {
	rules := []policy.Rule{{Name: "a", Limits: []sluice.Limit{sluice.PerHour(1)}}}
	set, err := policy.Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	svc := NewRulesService(policy.New(sluice.New(memory.New()), set))
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "a", "remote_address", "192.0.2.1")}}
	resp, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil || resp.OverallCode != OK {
		t.Fatalf("first request: %v, %v; want OK", resp, err)
	}
	if name := resp.Statuses[0].GetCurrentLimit().GetName(); name != "a-1h (token_bucket 1/1h0m0s)" {
		t.Errorf("current_limit name %q; want the limit named a-1h", name)
	}
	if name := rules[0].Limits[0].Name; name != "" {
		t.Errorf("Compile named the caller's limit %q", name)
	}
}

// TestRulesServicePlans: plans match the client key as the rule's key
// source yields it; a client of several entries is one key of its own,
// which a plan matches only as a whole.
func TestRulesServicePlans(t *testing.T) {
	svc, _ := rulesService(t, sluice.New(memory.New()), `
rules:
  - name: api
    key: ip
    limit: 1
    period: 1h
    plans:
      - {name: all, prefixes: ["ip:", "1"], limit: 5, period: 1h}
  - name: user
    group: user
    key: "header:X-User"
    limit: 1
    period: 1h
    plans:
      - {name: pro, keys: [ann], prefixes: ["k:"], limit: 5, period: 1h}
`)
	for _, tt := range []struct {
		d    *commonv3.RateLimitDescriptor
		want uint32
	}{
		{desc("rule", "api", "remote_address", "10.0.0.1"), 5},
		{desc("rule", "api", "remote_address", "::ffff:10.0.0.2"), 5}, // unmapped first
		{desc("rule", "api", "remote_address", "203.0.113.1"), 1},     // not by its namespace, "ip:"
		{desc("rule", "user", "user", "ann"), 5},
		{desc("rule", "user", "user", "bob"), 1},
		{desc("rule", "user", "user", "ann", "org", "acme"), 1}, // "user=ann;org=acme" is not ann
	} {
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{tt.d}})
		if err != nil || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != tt.want {
			t.Errorf("%v: %v, %v; want %d per hour", tt.d, resp, err, tt.want)
		}
	}
}

// canceledStore fails every decision with its context's error (and can
// do nothing but take and reset).
type canceledStore struct{ sluice.Store }

func (canceledStore) Take(ctx context.Context, _ sluice.Request) ([]sluice.Result, error) {
	return nil, ctx.Err()
}

func (canceledStore) Reset(context.Context, string, ...sluice.Limit) error { return nil }

// TestCanceled: both services answer Canceled, not Unavailable, when the
// caller gave up.
func TestCanceled(t *testing.T) {
	lim := sluice.New(canceledStore{storetest.TakeOnly(nil)})
	rules, _ := rulesService(t, lim, "rules:\n  - {name: login, key: ip, limit: 1, period: 1h}\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tt := range map[string]struct {
		svc rlsv3.RateLimitServiceServer
		req *rlsv3.RateLimitRequest
	}{
		"Service":      {NewService(lim, mustLoad(t, "database.yaml")), &rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*commonv3.RateLimitDescriptor{desc("database", "default")}}},
		"RulesService": {rules, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "remote_address", "192.0.2.1")}}},
	} {
		if _, err := tt.svc.ShouldRateLimit(ctx, tt.req); status.Code(err) != codes.Canceled {
			t.Errorf("%s: %v, want Canceled", name, err)
		}
	}
}

// stackedYAML limits every client per address and per API key, in two
// groups, with a rule in shadow mode watching besides.
const stackedYAML = `
rules:
  - {name: per-ip, key: ip, algorithm: fixed_window, limit: 3, period: 1m}
  - {name: api, group: keys, key: "header:X-API-Key", algorithm: fixed_window, limit: 2, period: 1h}
  - {name: audit, group: audit, key: ip, algorithm: fixed_window, limit: 1, period: 1h, shadow: true}
`

// TestRulesServiceStacked: the descriptors of one request are one
// decision. It is admitted only if every descriptor's rule admits it, and
// a denied request spends from none of them; a rule in shadow mode never
// denies, and is decided only when the others admit the request.
func TestRulesServiceStacked(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	svc, _ := rulesService(t, sluice.New(memory.New(), sluice.WithClock(clk.Now)), stackedYAML)
	fx := &fixture{client: serve(t, svc)}
	ip := desc("rule", "per-ip", "remote_address", "192.0.2.1")
	key := func(k string) *commonv3.RateLimitDescriptor { return desc("rule", "api", "api_key", k) }
	audit := desc("rule", "audit", "remote_address", "192.0.2.1")
	type status struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}
	for i, tt := range []struct {
		ds      []*commonv3.RateLimitDescriptor
		overall rlsv3.RateLimitResponse_Code
		want    []status
	}{
		{[]*commonv3.RateLimitDescriptor{ip, key("k1"), audit}, OK, []status{{OK, 2}, {OK, 1}, {OK, 0}}},
		{[]*commonv3.RateLimitDescriptor{ip, key("k1"), audit}, OK, []status{{OK, 1}, {OK, 0}, {OK, 0}}}, // audit would deny: OK
		// k1 is spent: the request is over the limit, per-ip reports its
		// unchanged state, and audit is not decided.
		{[]*commonv3.RateLimitDescriptor{ip, key("k1"), audit}, OVER, []status{{OK, 1}, {OVER, 0}, {OK, 0}}},
		{[]*commonv3.RateLimitDescriptor{key("k1"), ip}, OVER, []status{{OVER, 0}, {OK, 1}}},
		// The denials spent nothing from per-ip: one request is left.
		{[]*commonv3.RateLimitDescriptor{ip, key("k2")}, OK, []status{{OK, 0}, {OK, 1}}},
		// per-ip is spent now, and denies k3's first request, which spends
		// nothing of k3's.
		{[]*commonv3.RateLimitDescriptor{key("k3"), ip}, OVER, []status{{OK, 2}, {OVER, 0}}},
		{[]*commonv3.RateLimitDescriptor{key("k3")}, OK, []status{{OK, 1}}},
	} {
		resp := fx.call(t, "edge", 0, tt.ds...)
		var got []status
		for _, st := range resp.Statuses {
			got = append(got, status{st.Code, st.LimitRemaining})
		}
		if resp.OverallCode != tt.overall || !slices.Equal(got, tt.want) {
			t.Errorf("request %d: %v %v, want %v %v", i, resp.OverallCode, got, tt.overall, tt.want)
		}
	}
}

// TestRulesServiceShadowCost: a rule in shadow mode never makes a request
// over the limit, not even with a hits_addend it could never admit; the
// others still decide the request.
func TestRulesServiceShadowCost(t *testing.T) {
	svc, _ := rulesService(t, sluice.New(memory.New()), stackedYAML)
	fx := &fixture{client: serve(t, svc)}
	ip := desc("rule", "per-ip", "remote_address", "192.0.2.1")
	audit := desc("rule", "audit", "remote_address", "192.0.2.1")
	// hits_addend 2: audit (1 per hour) could never admit it, per-ip (3 per
	// minute) does.
	if r := fx.call(t, "edge", 2, ip, audit); r.OverallCode != OK || r.Statuses[0].Code != OK || r.Statuses[0].LimitRemaining != 1 || r.Statuses[1].Code != OK {
		t.Errorf("hits_addend 2 with a shadow rule of capacity 1: %v, want OK, per-ip spending 2", r)
	}
	if r := fx.call(t, "edge", 2, audit); r.OverallCode != OK {
		t.Errorf("hits_addend 2 for the shadow rule alone: %v, want OK", r)
	}
	// A cost an enforced rule could never admit is still over the limit.
	// Envoy still hears the limit and what is left of it, and nothing is
	// spent: the one request per-ip has left is still there.
	r := fx.call(t, "edge", 4, ip, audit)
	if st := r.Statuses[0]; r.OverallCode != OVER || st.Code != OVER || st.CurrentLimit.GetRequestsPerUnit() != 3 || st.LimitRemaining != 1 {
		t.Errorf("hits_addend 4 of per-ip's 3: %v, want OVER_LIMIT naming 3 per minute, 1 left", r)
	}
	if r.Statuses[1].Code != OK {
		t.Errorf("hits_addend 4: the shadow rule's status %v, want OK", r.Statuses[1])
	}
	if r := fx.call(t, "edge", 1, ip); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("after the impossible cost: %v, want OK with 0 left", r)
	}
}

// TestRulesServiceComposite: a descriptor with several client entries has
// a count of its own, which no single header value can share, whatever it
// spells.
func TestRulesServiceComposite(t *testing.T) {
	svc, e := rulesService(t, sluice.New(memory.New()), `
rules:
  - {name: search, key: header:X-API-Key, limit: 1, period: 1h}
`)
	fx := &fixture{client: serve(t, svc)}
	if r := fx.call(t, "edge", 0, desc("rule", "search", "user", "ann", "org", "acme")); r.OverallCode != OK {
		t.Fatalf("composite: %v, want OK", r)
	}
	if r := fx.call(t, "edge", 0, desc("rule", "search", "user", "ann", "org", "acme")); r.OverallCode != OVER {
		t.Fatalf("composite again: %v, want OVER_LIMIT", r)
	}
	// The header value that spells the joined entries is another client.
	d, err := e.Check(context.Background(), policy.Check{Rule: "search", Key: "user=ann;org=acme"})
	if err != nil || !d.Allowed {
		t.Errorf("the header value user=ann;org=acme: %+v, %v, want admitted (a count of its own)", d, err)
	}
}

// TestRulesServiceSharedWithServer: a descriptor keyed by remote_address
// spends the count that POST /v1/check spends for that address, and the
// middleware for requests from it, when they decide with one engine.
func TestRulesServiceSharedWithServer(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	svc, e := rulesService(t, sluice.New(memory.New(), sluice.WithClock(clk.Now)), stackedYAML)
	fx := &fixture{client: serve(t, svc)}
	api := server.New(e, server.WithClock(clk.Now))
	check := func(rule, key string) string {
		w := httptest.NewRecorder()
		api.ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(fmt.Sprintf(`{"rule":%q,"key":%q}`, rule, key))))
		return fmt.Sprint(w.Code, " ", w.Header().Get("X-RateLimit-Remaining"))
	}
	mw := httplimit.New(e)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func(remote string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-API-Key", "k0")
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, r)
		return w.Code
	}
	for i, step := range []struct {
		do   func() string
		want string
	}{
		{func() string { return check("per-ip", "2001:db8::1") }, "200 2"},
		{func() string {
			r := fx.call(t, "edge", 0, desc("rule", "per-ip", "remote_address", "2001:db8::2")) // the same /64
			return fmt.Sprint(r.OverallCode, " ", r.Statuses[0].LimitRemaining)
		}, "OK 1"},
		{func() string { return fmt.Sprint(send("[2001:db8::3]:443")) }, "200"},
		{func() string { return check("per-ip", "2001:db8::4") }, "429 0"},
		{func() string {
			r := fx.call(t, "edge", 0, desc("rule", "per-ip", "remote_address", "2001:db8:0:1::1")) // another /64
			return fmt.Sprint(r.OverallCode, " ", r.Statuses[0].LimitRemaining)
		}, "OK 2"},
		// A header rule: the descriptor's value is the header's.
		{func() string {
			r := fx.call(t, "edge", 0, desc("rule", "api", "api_key", "k1"))
			return fmt.Sprint(r.OverallCode, " ", r.Statuses[0].LimitRemaining)
		}, "OK 1"},
		{func() string { return check("api", "k1") }, "200 0"},
	} {
		if got := step.do(); got != step.want {
			t.Errorf("step %d: %s, want %s", i, got, step.want)
		}
	}
}

// TestRulesServiceMistakesBeforeCost: a descriptor that can never be
// decided is InvalidArgument, even beside one whose cost could never be
// admitted; and two descriptors whose entries spell one joined string
// keep counts of their own.
func TestRulesServiceMistakesBeforeCost(t *testing.T) {
	svc, _ := rulesService(t, sluice.New(memory.New()), `
rules:
  - {name: login, key: ip, limit: 2, period: 1m}
  - {name: api, group: api, key: "header:X-Key", limit: 2, period: 1m}
`)
	fx := &fixture{client: serve(t, svc)}
	login := desc("rule", "login", "remote_address", "10.0.0.1")
	for _, second := range []*commonv3.RateLimitDescriptor{
		desc("rule", "nope", "x", "y"),
		desc("rule", "login", "remote_address", "not-an-ip"),
		desc("rule", "login", "remote_address", "10.0.0.1"),
	} {
		_, err := fx.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 50,
			Descriptors: []*commonv3.RateLimitDescriptor{login, second}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("hits_addend 50 beside %v: %v, want InvalidArgument", second, err)
		}
	}
	attacker := desc("rule", "api", "a", "x;b=y", "b", "z")
	victim := desc("rule", "api", "a", "x", "b", "y;b=z")
	for range 2 {
		fx.call(t, "edge", 0, attacker)
	}
	if r := fx.call(t, "edge", 0, victim); r.OverallCode != OK {
		t.Errorf("another descriptor whose entries join to the same text: %v, want OK (a count of its own)", r.OverallCode)
	}
}

// TestRulesServiceClass: a descriptor's class entry names the request's
// priority class, no part of its client key: under a pool of 10 that keeps
// 20% for critical, the other classes get 8 and critical the rest.
func TestRulesServiceClass(t *testing.T) {
	svc, _ := rulesService(t, sluice.New(memory.New()), `
rules:
  - name: pool
    key: global
    algorithm: fixed_window
    limit: 10
    period: 1h
    priority: {reserve: {critical: 20%}}
`)
	fx := &fixture{client: serve(t, svc)}
	for i := range 8 {
		if r := fx.call(t, "edge", 0, desc("rule", "pool", "class", "bulk")); r.OverallCode != OK {
			t.Fatalf("bulk %d: %v, want OK", i+1, r)
		}
	}
	if r := fx.call(t, "edge", 0, desc("rule", "pool")); r.OverallCode != OVER {
		t.Errorf("a ninth of no class (the lowest): %v, want OVER_LIMIT", r)
	}
	for i := range 2 {
		if r := fx.call(t, "edge", 0, desc("rule", "pool", "class", "critical")); r.OverallCode != OK {
			t.Errorf("critical %d in the reserve: %v, want OK", i+1, r)
		}
	}
	if r := fx.call(t, "edge", 0, desc("rule", "pool", "class", "critical")); r.OverallCode != OVER {
		t.Errorf("critical with the pool full: %v, want OVER_LIMIT", r)
	}
}
