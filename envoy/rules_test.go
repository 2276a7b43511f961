package envoy

import (
	"context"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/store/memory"
)

// TestRulesService: Envoy descriptors name sluice rules with a "rule"
// entry and the client with the others.
func TestRulesService(t *testing.T) {
	f, err := config.Parse("sluice.yaml", []byte(`
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
`))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	svc := NewRulesService(sluice.New(memory.New(), sluice.WithClock(clk.Now)), f)
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
	// Mistakes are InvalidArgument, saying what is wrong.
	for _, tt := range []struct {
		d    []string
		says string
	}{
		{[]string{"remote_address", "1.2.3.4"}, `no "rule" entry`},
		{[]string{"rule", "nope", "remote_address", "1.2.3.4"}, `unknown rule "nope"`},
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

// TestRulesServiceNilAndCopy: a nil File means no rules, as in server.New
// and server.Update, and the service keeps its own copy of the rule list,
// so that the caller changing its File changes nothing.
func TestRulesServiceNilAndCopy(t *testing.T) {
	lim := sluice.New(memory.New())
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "remote_address", "192.0.2.1")}}
	svc := NewRulesService(lim, nil)
	if _, err := svc.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `unknown rule "login"`) {
		t.Errorf("no rules: %v, want InvalidArgument, unknown rule", err)
	}
	f, err := config.Parse("sluice.yaml", []byte("rules:\n  - {name: login, key: ip, limit: 1, period: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	svc.Update(f)
	f.Rules[0].Shadow = true // the caller's copy, not the service's
	for i, want := range []rlsv3.RateLimitResponse_Code{OK, OVER} {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil || resp.OverallCode != want {
			t.Fatalf("request %d: %v, %v; want %v", i+1, resp, err, want)
		}
	}
	svc.Update(nil)
	if _, err := svc.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("after Update(nil): %v, want InvalidArgument", err)
	}
}

// TestRulesServiceNamesLimits: rules built in code get their limits named
// as a policy file names them, as Envoy's current_limit shows, and the
// caller's File is left unnamed.
func TestRulesServiceNamesLimits(t *testing.T) {
	f := &config.File{Rules: []config.Rule{
		{Name: "a", Key: config.Key{Source: "ip"}, Cost: 1, Limits: []sluice.Limit{sluice.PerHour(1)}},
	}}
	svc := NewRulesService(sluice.New(memory.New()), f)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "a", "remote_address", "192.0.2.1")}}
	resp, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil || resp.OverallCode != OK {
		t.Fatalf("first request: %v, %v; want OK", resp, err)
	}
	if name := resp.Statuses[0].GetCurrentLimit().GetName(); !strings.HasPrefix(name, "a-1h (") {
		t.Errorf("current_limit name %q; want the limit named a-1h", name)
	}
	if name := f.Rules[0].Limits[0].Name; name != "" {
		t.Errorf("Update named the caller's limit %q", name)
	}
}

// TestRulesServicePlans: plans match the client when one entry identifies
// it; a client of several entries gets the rule's own limits, whatever a
// plan's prefixes.
func TestRulesServicePlans(t *testing.T) {
	f, err := config.Parse("sluice.yaml", []byte(`
rules:
  - name: api
    key: ip
    limit: 1
    period: 1h
    plans:
      - {name: all, prefixes: ["envoy:", "1"], limit: 5, period: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	svc := NewRulesService(sluice.New(memory.New()), f)
	for _, tt := range []struct {
		d    *commonv3.RateLimitDescriptor
		want uint32
	}{
		{desc("rule", "api", "remote_address", "10.0.0.1"), 5},
		{desc("rule", "api", "remote_address", "10.0.0.1", "user", "ann"), 1},
		{desc("rule", "api"), 1},
	} {
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{tt.d}})
		if err != nil || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != tt.want {
			t.Errorf("%v: %v, %v; want %d per hour", tt.d, resp, err, tt.want)
		}
	}
}

// canceledStore fails every decision with its context's error.
type canceledStore struct{}

func (canceledStore) Take(ctx context.Context, _ sluice.Request) ([]sluice.Result, error) {
	return nil, ctx.Err()
}

func (canceledStore) Reset(context.Context, string, ...sluice.Limit) error { return nil }

// TestCanceled: both services answer Canceled, not Unavailable, when the
// caller gave up.
func TestCanceled(t *testing.T) {
	f, err := config.Parse("sluice.yaml", []byte("rules:\n  - {name: login, key: ip, limit: 1, period: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	lim := sluice.New(canceledStore{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tt := range map[string]struct {
		svc rlsv3.RateLimitServiceServer
		req *rlsv3.RateLimitRequest
	}{
		"Service":      {NewService(lim, mustLoad(t, "database.yaml")), &rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*commonv3.RateLimitDescriptor{desc("database", "default")}}},
		"RulesService": {NewRulesService(lim, f), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "remote_address", "192.0.2.1")}}},
	} {
		if _, err := tt.svc.ShouldRateLimit(ctx, tt.req); status.Code(err) != codes.Canceled {
			t.Errorf("%s: %v, want Canceled", name, err)
		}
	}
}
