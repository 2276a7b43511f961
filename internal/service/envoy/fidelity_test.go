//go:build integration

package envoy

// Fidelity cases found in review: each test failed on an earlier version
// of the package, answering otherwise than envoyproxy/ratelimit
// (v1.4.1-0.20260122083618-3fb702589d36) where the README does not say
// sluice deliberately differs, or with a bug of sluice's own. The
// expectation of each is upstream's answer, with the place in its source
// that gives it, unless the test says it checks a deliberate difference.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// fidelityService serves the one file text from store at upstreamNow.
func fidelityService(t *testing.T, store sluice.Store, text string, opts ...ServiceOption) rlsv3.RateLimitServiceClient {
	t.Helper()
	cfg, err := ParseConfig("review.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return upstreamNow }
	svc := NewService(sluice.New(store, sluice.WithClock(now)), cfg, opts...)
	svc.now = now
	return serve(t, svc)
}

func fidelityAsk(t *testing.T, c rlsv3.RateLimitServiceClient, what string, want *rlsv3.RateLimitResponse, domain string, hits uint32, ds ...*commonv3.RateLimitDescriptor) {
	t.Helper()
	got, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
	}
}

// Two descriptors of one request that share one count (the same entries,
// as when two rate_limits of a route make the same descriptor, or two
// values of one share_threshold wildcard). Upstream decides them in
// request order, one pipelined INCRBY after the other
// (src/redis/fixed_cache_impl.go:154-182,208-217): the first is OK, the
// second OVER_LIMIT. sluice decides them concurrently (decideAll), so
// which one is admitted is a race.
func TestFidelitySharedCountInRequestOrder(t *testing.T) {
	conformanceStores(t, func(t *testing.T, store sluice.Store) {
		c := fidelityService(t, store, `
domain: review
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: "shared/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
		for i := range 100 {
			v := strconv.Itoa(i)
			fidelityAsk(t, c, "same descriptor twice, round "+v,
				resp(limited(OK, "", 1, minute, 0), limited(OVER, "", 1, minute, 0)),
				"review", 1, desc("k", v), desc("k", v))
		}
		fidelityAsk(t, c, "two values of a shared wildcard",
			resp(limited(OK, "", 1, minute, 0), limited(OVER, "", 1, minute, 0), limited(OVER, "", 1, minute, 0)),
			"review", 1, desc("path", "shared/a"), desc("path", "shared/b"), desc("path", "shared/c"))
	})
}

// unit_multiplier (sluice's extension) times a long unit overflows
// time.Duration silently: 73118 years wraps to 1733 hours (72 days), a
// whole number of microseconds that passes Limit.Validate (MaxPeriod is
// 10 years), so the file loads and enforces a limit 370,000 times shorter
// than written. 11 years is refused; 73118 years must be too. (Most
// multipliers that overflow happen to be refused only because the wrapped
// period is not a whole number of microseconds.) A limit override's
// unit_multiplier wraps the same way (override in service.go).
func TestFidelityUnitMultiplierOverflow(t *testing.T) {
	for _, tc := range []struct{ unit, mult string }{{"year", "73118"}, {"month", "889600"}, {"week", "3812572"}, {"day", "26687998"}} {
		cfg, err := ParseConfig("review.yaml", []byte(`
domain: review
descriptors:
  - key: k
    rate_limit: {unit: `+tc.unit+`, unit_multiplier: `+tc.mult+`, requests_per_unit: 1}
`))
		if err == nil {
			t.Errorf("%s × %s loads, enforced with a period of %s", tc.unit, tc.mult, cfg.Match("review", []Entry{{"k", "x"}}).RateLimit.Limit.Period)
		}
	}
}

// A limit override Envoy sends with unit_multiplier. Upstream builds the
// override from requests_per_unit and unit only
// (src/config/config_impl.go:332-347, NewRateLimit at :88-106): the
// window is one unit. sluice deliberately honours the multiplier, as in a
// file (the README's table says so): 3 per 5 minutes, reported with the
// multiplier, resetting at the end of the 5-minute window.
func TestFidelityOverrideUnitMultiplier(t *testing.T) {
	conformanceStores(t, func(t *testing.T, store sluice.Store) {
		c := fidelityService(t, store, "domain: review\n")
		over := desc("anything", "x")
		over.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5)}
		st := limited(OK, "", 3, minute, 2)
		st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(5)
		st.DurationUntilReset.Seconds = 300 - upstreamNow.Unix()%300
		fidelityAsk(t, c, "override with unit_multiplier", resp(st), "review", 1, over)
	})
}

// Files upstream loads that sluice refuses. Upstream decodes with
// gopkg.in/yaml.v2 (src/config/config_impl.go:11,568-588): an empty
// "descriptors:" is a nil list (a domain with no limits, or a node that
// only groups nothing), an empty "rate_limit:" a nil *YamlRateLimit (a
// node without a limit), integers are YAML 1.1's, so "1_000" is 1000 and
// "0x10" is 16 (yaml.v2 resolve.go strips '_' and parses with base 0).
// (A mapping key given twice, whose last value yaml.v2 keeps, sluice
// deliberately refuses: see TestFidelityFieldTwice.)
func TestFidelityFilesUpstreamLoads(t *testing.T) {
	for name, text := range map[string]string{
		"empty descriptors": "domain: placeholder\ndescriptors:\n",
		"empty nested descriptors": `
domain: review
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
`,
		"rate_limit left empty": `
domain: review
descriptors:
  - key: k
    rate_limit:
`,
		"hexadecimal integer": `
domain: review
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 0x10}
`,
		"underscored integer": `
domain: review
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1_000}
`,
	} {
		if _, err := ParseConfig("review.yaml", []byte(text)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A YAML 1.1 octal integer: upstream (yaml.v2, base 0) reads
// requests_per_unit: 010 as 8; sluice reads 10.
func TestFidelityOctalRequestsPerUnit(t *testing.T) {
	cfg, err := ParseConfig("review.yaml", []byte(`
domain: review
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 010}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Match("review", []Entry{{"k", "x"}}).RateLimit.RequestsPerUnit; got != 8 {
		t.Errorf("requests_per_unit: 010 is %d; upstream reads 8", got)
	}
}

// LoadConfig of a symbolic link to a directory (say /etc/ratelimit ->
// /srv/runtime_data/current/ratelimit/config): os.Stat says a directory,
// but ConfigFiles' filepath.WalkDir does not follow a root that is a link
// and finds no file, so the Config has no domains and every request is
// answered OK, with no error and nothing logged: a silent fail-open.
// (Upstream's goruntime walks with filepath.Walk and would not follow such
// a root either, but it does not report a directory to begin with; the
// bug is sluice's contract: "one file or a directory".)
func TestFidelityConfigDirectoryThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"v1/config/a.yaml": limitsFile("a", "k")})
	link := filepath.Join(dir, "current")
	if err := os.Symlink(filepath.Join(dir, "v1", "config"), link); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(link)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Domains["a"] == nil {
		t.Errorf("through the link: domains %v, files %v; want domain a", cfg.Domains, cfg.Files)
	}
}

// The same overflow in a limit override Envoy sends: 889600 months wraps
// to 53 hours, accepted and enforced as "3 per 53 hours".
func TestFidelityOverrideUnitMultiplierOverflow(t *testing.T) {
	c := fidelityService(t, memory.New(), "domain: review\n")
	over := desc("anything", "x")
	over.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MONTH, UnitMultiplier: wrapperspb.UInt32(889600)}
	got, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "review", Descriptors: []*commonv3.RateLimitDescriptor{over}})
	if err == nil {
		t.Errorf("an override of 3 per 889600 months is decided as %v", got.Statuses[0])
	}
}

// value: ~ (or null). Upstream's yaml.v2 decodes a null into the empty
// string (YamlDescriptor.Value, src/config/config_impl.go:28-31), so the
// node is key-only and matches every value of k
// (src/config/config_impl.go:141-145,388-392). sluice keeps the text "~"
// as an exact value, and the limit applies to nothing.
func TestFidelityNullValueIsKeyOnly(t *testing.T) {
	c := fidelityService(t, memory.New(), `
domain: review
descriptors:
  - key: k
    value: ~
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	fidelityAsk(t, c, "any value of k", resp(limited(OK, "", 5, minute, 4)), "review", 1, desc("k", "anything"))
}

// A key-only descriptor whose key ends in '*'. Upstream puts every
// descriptor whose composite key (key, or key_value) ends in '*' in the
// level's wildcardKeys (src/config/config_impl.go:212-215) and matches a
// request entry against them by prefix of "key_value"
// (src/config/config_impl.go:377-385), so key "x-*" matches the entry
// x-user=1; share_threshold is accepted on it, since the check is on the
// composite key (src/config/config_impl.go:197-204). sluice takes "x-*"
// as a literal key, and refuses share_threshold on it.
func TestFidelityWildcardKey(t *testing.T) {
	c := fidelityService(t, memory.New(), `
domain: review
descriptors:
  - key: "x-*"
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	if _, err := ParseConfig("review.yaml", []byte(`
domain: review
descriptors:
  - key: "x-*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`)); err != nil {
		t.Errorf("share_threshold on key x-*: %v", err)
	}
	fidelityAsk(t, c, "x-user=1", resp(limited(OK, "", 5, minute, 4)), "review", 1, desc("x-user", "1"))
}

// A field given twice: upstream (yaml.v2's Unmarshal) keeps the last
// value; sluice deliberately refuses the file, naming the line, as it
// refuses a field in the wrong place: which of two requests_per_unit the
// author meant is not for the parser to guess.
func TestFidelityFieldTwice(t *testing.T) {
	_, err := ParseConfig("review.yaml", []byte("domain: review\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, requests_per_unit: 2}\n"))
	if err == nil || !strings.Contains(err.Error(), `review.yaml:4: duplicate field "requests_per_unit" in rate_limit`) {
		t.Errorf("error %v", err)
	}
}
