package envoy

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestNegativeHits: a descriptor with is_negative_hits gives its
// hits_addend back (sluice.Limiter.Refund) and answers OK with what is
// left, so the next requests are admitted again; a refund above the
// limit gives back at most a full window, one of 0 only reports; a store
// that cannot give back is FailedPrecondition, spending nothing.
func TestNegativeHits(t *testing.T) {
	f := start(t)
	refund := func(hits uint64) *rlsv3.RateLimitResponse {
		t.Helper()
		d := desc("database", "users")
		d.IsNegativeHits = true
		d.HitsAddend = wrapperspb.UInt64(hits)
		return f.call(t, "mongo_cps", 0, d)
	}
	if r := f.call(t, "mongo_cps", 4, desc("database", "users")); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("4 of 5: %v", r)
	}
	if r := refund(3); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 4 || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Errorf("a refund of 3: %v, want OK, 4 remaining of 5", r)
	}
	if r := f.call(t, "mongo_cps", 4, desc("database", "users")); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("4 after the refund: %v, want OK, 0 remaining", r)
	}
	if r := refund(0); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("a refund of 0: %v, want OK, 0 remaining (nothing given back)", r)
	}
	if r := refund(9); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 5 {
		t.Errorf("a refund of 9 with 5 consumed: %v, want OK, 5 remaining", r)
	}

	// Over a store that is no Settler: refused, and nothing spent.
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 250e6, time.UTC)}
	lim := sluice.New(storetest.TakeOnly(memory.New()), sluice.WithClock(clk.Now))
	svc := NewService(lim, mustLoad(t, "database.yaml"), WithLogger(slog.New(slog.DiscardHandler)))
	svc.now = clk.Now
	client := serve(t, svc)
	d := desc("database", "users")
	d.IsNegativeHits, d.HitsAddend = true, wrapperspb.UInt64(2)
	_, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*commonv3.RateLimitDescriptor{d}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is_negative_hits") {
		t.Errorf("a refund over a store without Refund: %v, want FailedPrecondition naming is_negative_hits", err)
	}
}

// TestRulesNegativeHits: on the rules door a descriptor with
// is_negative_hits gives its cost back under its rule
// (policy.Engine.Refund), at most the rule's smallest capacity, answered
// OK with what remains; in a request that also spends, the refunds come
// first; over a store that cannot give back it is FailedPrecondition.
func TestRulesNegativeHits(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const rules = `
rules:
  - name: login
    key: ip
    limits:
      - {limit: 2, period: 1m}
`
	svc, _ := rulesService(t, sluice.New(memory.New(), sluice.WithClock(clk.Now)), rules)
	fx := &fixture{client: serve(t, svc)}
	login := func(ip string, hits uint64, negative bool) *commonv3.RateLimitDescriptor {
		d := desc("rule", "login", "remote_address", ip)
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(hits), negative
		return d
	}
	if r := fx.call(t, "edge", 0, login("192.0.2.9", 2, false)); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("2 of 2: %v", r)
	}
	if r := fx.call(t, "edge", 0, login("192.0.2.9", 1, true)); r.OverallCode != OK || r.Statuses[0].Code != OK || r.Statuses[0].LimitRemaining != 1 {
		t.Errorf("a refund of 1: %v, want OK, 1 remaining", r)
	}
	// Refund first, then spend: 2 of 192.0.2.9's are given back, and
	// 192.0.2.10 spends 2 of its own.
	r := fx.call(t, "edge", 0, login("192.0.2.10", 2, false), login("192.0.2.9", 5, true))
	if r.OverallCode != OK || len(r.Statuses) != 2 || r.Statuses[0].LimitRemaining != 0 || r.Statuses[1].LimitRemaining != 2 {
		t.Errorf("a spend beside a refund of 5 (capped at 2): %v, want OK, 0 and 2 remaining", r)
	}
	if r := fx.call(t, "edge", 0, login("192.0.2.9", 2, false)); r.OverallCode != OK {
		t.Errorf("2 after the refunds: %v, want OK", r)
	}

	hidden, _ := rulesService(t, sluice.New(storetest.TakeOnly(memory.New()), sluice.WithClock(clk.Now)), rules)
	hfx := &fixture{client: serve(t, hidden)}
	_, err := hfx.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{login("192.0.2.9", 1, true)}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is_negative_hits") {
		t.Errorf("a refund over a store without Refund: %v, want FailedPrecondition naming is_negative_hits", err)
	}
}
