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
	lim := sluice.New(struct{ sluice.Store }{memory.New()}, sluice.WithClock(clk.Now))
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

// TestRulesNegativeHits: the rules door refuses is_negative_hits, which
// it would otherwise count as hits, as InvalidArgument, spending nothing.
func TestRulesNegativeHits(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	svc, _ := rulesService(t, sluice.New(memory.New(), sluice.WithClock(clk.Now)), `
rules:
  - name: login
    key: ip
    limits:
      - {limit: 2, period: 1m}
`)
	fx := &fixture{client: serve(t, svc)}
	d := desc("rule", "login", "remote_address", "192.0.2.9")
	d.IsNegativeHits = true
	_, err := fx.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{d}, HitsAddend: 1})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "is_negative_hits") {
		t.Errorf("is_negative_hits on a rule: %v, want InvalidArgument naming it", err)
	}
	if r := fx.call(t, "edge", 2, desc("rule", "login", "remote_address", "192.0.2.9")); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("2 of 2 after the refused refund: %v, want OK, 0 remaining (it spent nothing)", r)
	}
}
