package envoy

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// fuzzRules has a rule of every key source, a plan and a rule in shadow
// mode, for the RulesService.
const fuzzRules = `
rules:
  - {name: login, match: POST /login, key: ip, limit: 2, period: 1m, plans: [{name: vip, keys: [10.0.0.1], limit: 5, period: 1m}]}
  - {name: api, match: /api, key: "header:X-Key", algorithm: gcra, limit: 5, period: 1s, burst: 3}
  - {name: all, match: /all, key: global, limit: 10, period: 1h, cost: 2}
  - {name: probe, match: /probe, key: ip, limit: 1, period: 1m, shadow: true}
`

// FuzzDescriptors gives both services arbitrary requests (the fuzzer's
// bytes as a RateLimitRequest in protobuf, as they come off the wire;
// bytes that are not one, invalid UTF-8 included, never reach a service):
// neither panics, and each answers a response with one OK or OVER_LIMIT
// status per descriptor, or InvalidArgument.
func FuzzDescriptors(f *testing.F) {
	one := func(n uint64) *wrapperspb.UInt64Value { return wrapperspb.UInt64(n) }
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "remote_address", "203.0.113.7")}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "remote_address", "10.0.0.1"), desc("rule", "api", "x-key", "k")}, HitsAddend: 2},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "api", "a", "1", "b", "2")}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "all"), desc("rule", "probe", "remote_address", "2001:db8::1")}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "remote_address", "nope")}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: desc("rule", "api", "x-key", "k").Entries, HitsAddend: one(1 << 40)}}},
		{Domain: "edge_proxy_per_ip", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "50.0.0.5"), desc("remote_address", "192.168.3.4")}},
		{Domain: "edge_proxy_per_ip", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}, HitsAddend: 7},
		{Domain: "mongo_cps", Descriptors: []*commonv3.RateLimitDescriptor{desc("database", "users"), desc("database", "default")}},
		{Domain: "messaging", Descriptors: []*commonv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2061234567")}},
		{Domain: "edge_proxy_per_ip", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: desc("remote_address", "1.2.3.4").Entries,
			Limit:   &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE},
		}}},
		{Domain: "edge_proxy_per_ip", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: desc("remote_address", "1.2.3.4").Entries, Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typev3.RateLimitUnit_YEAR}}}},
		{Domain: "", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login")}},
		{Domain: "edge"},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{}}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: desc("rule", "login", "remote_address", "203.0.113.7").Entries, HitsAddend: one(3), IsNegativeHits: true},
			desc("rule", "api", "x-key", "k"),
		}},
		{Domain: "mongo_cps", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: desc("database", "users").Entries, HitsAddend: one(1 << 40), IsNegativeHits: true}}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 250e6, time.UTC)}
	lim := sluice.New(memory.New(memory.WithClock(clk.Now)), sluice.WithClock(clk.Now))
	file, err := config.Parse("sluice.yaml", []byte(fuzzRules))
	if err != nil {
		f.Fatal(err)
	}
	set, err := file.Compile()
	if err != nil {
		f.Fatal(err)
	}
	rulesSvc := NewRulesService(policy.New(lim, set, policy.WithLogger(slog.New(slog.DiscardHandler))))
	var cfgs []*Config
	for _, name := range []string{"database.yaml", "messaging.yaml", "edge.yaml", "features.yaml"} {
		c, err := LoadConfig(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		cfgs = append(cfgs, c)
	}
	cfg, err := Merge(cfgs)
	if err != nil {
		f.Fatal(err)
	}
	files := NewService(lim, cfg, WithHeaders(HeadersIETF), WithLogger(slog.New(slog.DiscardHandler)))
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(wire, &req) != nil {
			return // grpc-go refuses it before any service runs
		}
		for _, svc := range []struct {
			name string
			s    rlsv3.RateLimitServiceServer
		}{{"RulesService", rulesSvc}, {"Service", files}} {
			resp, err := svc.s.ShouldRateLimit(context.Background(), &req)
			if err != nil {
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("%s(%v): %v, want InvalidArgument or an answer", svc.name, &req, err)
				}
				continue
			}
			if c := resp.GetOverallCode(); c != OK && c != OVER {
				t.Fatalf("%s(%v): overall code %v", svc.name, &req, c)
			}
			if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
				t.Fatalf("%s(%v): %d statuses for %d descriptors", svc.name, &req, len(resp.GetStatuses()), len(req.GetDescriptors()))
			}
			over := false
			for i, st := range resp.GetStatuses() {
				if st.GetCode() != OK && st.GetCode() != OVER {
					t.Fatalf("%s(%v): status %d code %v", svc.name, &req, i, st.GetCode())
				}
				over = over || st.GetCode() == OVER
			}
			if over != (resp.GetOverallCode() == OVER) {
				t.Fatalf("%s(%v): overall %v, statuses %v", svc.name, &req, resp.GetOverallCode(), resp.GetStatuses())
			}
		}
	})
}
