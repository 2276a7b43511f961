package envoy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// descriptorsOf returns n descriptors made by one(i).
func descriptorsOf(n int, one func(i int) *commonv3.RateLimitDescriptor) []*commonv3.RateLimitDescriptor {
	ds := make([]*commonv3.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = one(i)
	}
	return ds
}

// wantTooMany fails t unless err is InvalidArgument naming the count n
// and the cap.
func wantTooMany(t *testing.T, err error, n int) {
	t.Helper()
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, fmt.Sprintf("holds %d descriptors", n)) ||
		!strings.Contains(msg, fmt.Sprintf("at most %d", MaxDescriptors)) {
		t.Fatalf("%d descriptors: %v, want InvalidArgument naming %d and the cap %d", n, err, n, MaxDescriptors)
	}
}

// TestServiceMaxDescriptors: a request of more than MaxDescriptors
// descriptors is InvalidArgument, saying the count and the cap, and spends
// nothing; MaxDescriptors are decided.
func TestServiceMaxDescriptors(t *testing.T) {
	f := start(t)
	// database_default allows 3 a second, on a clock that stands still.
	for _, n := range []int{MaxDescriptors + 1, 10_000} {
		_, err := f.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "mongo_cps",
			Descriptors: descriptorsOf(n, func(int) *commonv3.RateLimitDescriptor { return desc("database", "default") })})
		wantTooMany(t, err, n)
	}
	if r := f.call(t, "mongo_cps", 0, desc("database", "default")); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("after the refused requests: %v, want OK with 2 of 3 left (nothing spent)", r)
	}
	ds := descriptorsOf(MaxDescriptors, func(i int) *commonv3.RateLimitDescriptor { return desc("database", fmt.Sprint("db", i)) })
	if r := f.call(t, "mongo_cps", 0, ds...); len(r.Statuses) != MaxDescriptors {
		t.Fatalf("%d descriptors: %d statuses", MaxDescriptors, len(r.Statuses))
	}
}

// TestRulesServiceMaxDescriptors: as TestServiceMaxDescriptors, for a
// sluice policy file.
func TestRulesServiceMaxDescriptors(t *testing.T) {
	svc, _ := rulesService(t, sluice.New(memory.New()), "rules:\n  - {name: login, key: ip, limit: 2, period: 1h}\n")
	fx := &fixture{client: serve(t, svc)}
	client := func(i int) *commonv3.RateLimitDescriptor {
		return desc("rule", "login", "remote_address", fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	for _, n := range []int{MaxDescriptors + 1, 10_000} {
		_, err := fx.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descriptorsOf(n, client)})
		wantTooMany(t, err, n)
	}
	if r := fx.call(t, "edge", 0, client(0)); r.OverallCode != OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("after the refused requests: %v, want OK with 1 of 2 left (nothing spent)", r)
	}
	if r := fx.call(t, "edge", 0, descriptorsOf(MaxDescriptors, client)...); len(r.Statuses) != MaxDescriptors {
		t.Fatalf("%d descriptors: %v", MaxDescriptors, r)
	}
}
