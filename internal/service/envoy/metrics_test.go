package envoy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/store/memory"
)

// scrape returns the exposition text of m.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(w.Result().Body)
	return string(b)
}

// TestUnknownDomain: sluice_envoy_unknown_domain_total is exported from
// the start, at 0, and counts every request an envoy.Service answers for
// a domain its configuration does not have, without the domain as a
// label.
func TestUnknownDomain(t *testing.T) {
	m := metrics.New()
	if text := scrape(t, m); !strings.Contains(text, "sluice_envoy_unknown_domain_total 0") {
		t.Errorf("before any request, metrics lack sluice_envoy_unknown_domain_total 0")
	}
	cfg, err := envoy.ParseConfig("known.yaml", []byte("domain: known\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	svc := envoy.NewService(sluice.New(memory.New()), cfg, envoy.WithUnknownDomain(m.UnknownDomain), envoy.WithLogger(slog.New(slog.DiscardHandler)))
	for _, domain := range []string{"known", "other", "other", "third"} {
		req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
		}}}
		if resp, err := svc.ShouldRateLimit(context.Background(), req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("domain %s: %v, %v; want OK", domain, resp, err)
		}
	}
	text := scrape(t, m)
	if want := "sluice_envoy_unknown_domain_total 3"; !strings.Contains(text, want) {
		t.Errorf("metrics lack %s", want)
	}
	if strings.Contains(text, `"other"`) {
		t.Errorf("a client's domain became a label:\n%s", text)
	}
}
