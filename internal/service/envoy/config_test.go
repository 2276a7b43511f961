package envoy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
)

func mustLoad(t *testing.T, files ...string) *Config {
	t.Helper()
	var cfgs []*Config
	for _, f := range files {
		c, err := LoadConfig(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, c)
	}
	c, err := Merge(cfgs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLoadFixtures(t *testing.T) {
	c := mustLoad(t, "database.yaml", "messaging.yaml", "edge.yaml", "features.yaml")
	cases := []struct {
		domain  string
		entries []Entry
		want    string // limit, or "" for no match
	}{
		{"mongo_cps", []Entry{{"database", "users"}}, "mongo_cps.database_users: fixed_window 5/1s"},
		{"mongo_cps", []Entry{{"database", "default"}}, "mongo_cps.database_default: fixed_window 3/1s"},
		{"mongo_cps", []Entry{{"database", "other"}}, ""},
		{"messaging", []Entry{{"message_type", "marketing"}, {"to_number", "2061234567"}}, "messaging.message_type_marketing.to_number: fixed_window 2/24h0m0s"},
		{"messaging", []Entry{{"to_number", "2061234567"}}, "messaging.to_number: fixed_window 4/24h0m0s"},
		{"messaging", []Entry{{"message_type", "marketing"}}, ""},  // no limit at that depth
		{"messaging", []Entry{{"to_number", "1"}, {"x", "y"}}, ""}, // deeper than the tree
		{"edge_proxy_per_ip", []Entry{{"remote_address", "1.2.3.4"}}, "edge_proxy_per_ip.remote_address: fixed_window 3/1s"},
		{"edge_proxy_per_ip", []Entry{{"remote_address", "50.0.0.5"}}, "edge_proxy_per_ip.remote_address_50.0.0.5: fixed_window 1/1s"},
		{"edge_proxy_per_ip", []Entry{{"remote_address", "192.168.1.1"}}, "edge_proxy_per_ip.remote_address_192.168._: fixed_window 2/1m0s"},
		{"api", []Entry{{"path", "/bucket"}}, "api.path__bucket: token_bucket 60/1m0s"},
		{"api", []Entry{{"client", "acme"}, {"path", "/upload"}}, "upload: fixed_window 4/2h0m0s"[len("upload: "):]},
		{"nope", []Entry{{"a", "b"}}, ""},
	}
	for _, tc := range cases {
		d := c.Match(tc.domain, tc.entries)
		got := ""
		if d != nil {
			got = d.RateLimit.Limit.String()
		}
		if !strings.HasSuffix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("Match(%s, %v) = %q, want %q", tc.domain, tc.entries, got, tc.want)
		}
	}
	un := c.Match("edge_proxy_per_ip", []Entry{{"remote_address", "10.0.0.1"}})
	if un == nil || !un.RateLimit.Unlimited {
		t.Errorf("10.0.0.1: want unlimited, got %+v", un)
	}
	up := c.Match("api", []Entry{{"client", "acme"}, {"path", "/upload"}})
	if up.RateLimit.Name != "upload" || len(up.RateLimit.Replaces) != 1 || up.RateLimit.Limit.Period != 2*time.Hour {
		t.Errorf("upload: %+v", up.RateLimit)
	}
	// Only domains with replaces have requests look for them.
	if !c.Domains["api"].replaces || c.Domains["mongo_cps"].replaces || c.Domains["messaging"].replaces {
		t.Error("replaces recorded for the wrong domains")
	}
	if sh := c.Match("api", []Entry{{"path", "/shadow"}}); !sh.ShadowMode {
		t.Error("shadow_mode not loaded")
	}
	if d := c.Match("mongo_cps", []Entry{{"database", "users"}}); d.RateLimit.Algorithm != sluice.FixedWindow || d.Line != 5 {
		t.Errorf("database users: algorithm %s line %d", d.RateLimit.Algorithm, d.Line)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: a\n    vaule: b\n", `f.yaml:4: unknown field "vaule" in a descriptor`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", `f.yaml:5: invalid rate limit unit "fortnight"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n", `f.yaml:6: requests_per_unit must be a whole number`},
		{"domain: d\ndescriptors:\n  - value: a\n", `f.yaml:3: descriptor has an empty key`},
		{"descriptors: []\n", `f.yaml:1: config file has no domain`},
		{"domain: d\nextra: 1\n", `f.yaml:2: unknown field "extra" in the config file`},
		{"domain: d\ndescriptors:\n  - key: a\n  - key: a\n", `f.yaml:4: duplicate descriptor "d.a"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n", `f.yaml:6: an unlimited rate_limit must not set a unit`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: leaky\n", `f.yaml:7: invalid limit: algorithm "leaky"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 20000\n      algorithm: sliding_log\n", `f.yaml:5: invalid limit (d.a: sliding_log`},
		{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n", `f.yaml:4: shadow_mode must be true or false`},
		{"domain: [d\n", `f.yaml:1: invalid YAML: did not find expected ',' or ']'`},
		{"domain: d\ndescriptors:\n  - key: a\n\t- key: b\n", `f.yaml:4: invalid YAML: found a tab character that violates indentation (indent with spaces: YAML does not allow tabs)`},
		{"", `f.yaml: empty config file`},
	}
	for _, tc := range cases {
		_, err := ParseConfig("f.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q) = %v, want error containing %q", tc.yaml, err, tc.want)
		}
	}
	if _, err := LoadConfig("testdata/missing.yaml"); err == nil {
		t.Error("missing file: no error")
	}
	a, b := mustLoad(t, "database.yaml"), mustLoad(t, "database.yaml")
	if _, err := Merge([]*Config{a, b}); err == nil {
		t.Error("Merge of a duplicate domain: no error")
	}
}

func TestStorageKeyDistinct(t *testing.T) {
	keys := map[string]bool{}
	for _, es := range [][]Entry{
		{{"a", "b"}}, {{"a", ""}, {"b", ""}}, {{"a:b", ""}}, {{"a", "b:"}}, {{"ab", ""}}, {{"a", "b"}, {"", ""}},
	} {
		k := storageKey("d", es)
		if keys[k] {
			t.Errorf("storage key %q repeated", k)
		}
		keys[k] = true
	}
}

func TestLimitName(t *testing.T) {
	if got := limitName("d.path_/a b*"); got != "d.path__a_b_" {
		t.Errorf("limitName = %q", got)
	}
	if err := (sluice.Limit{Limit: 1, Period: time.Second, Name: limitName("x.é/ü")}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestUnits: one table gives each unit's name, period and protocol values.
func TestUnits(t *testing.T) {
	for _, tt := range []struct {
		name     string
		period   time.Duration
		current  rlsv3.RateLimitResponse_RateLimit_Unit
		override typev3.RateLimitUnit
	}{
		{"second", time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, typev3.RateLimitUnit_SECOND},
		{"minute", time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE, typev3.RateLimitUnit_MINUTE},
		{"hour", time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR, typev3.RateLimitUnit_HOUR},
		{"day", 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY, typev3.RateLimitUnit_DAY},
		{"week", 7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK, typev3.RateLimitUnit_UNKNOWN},
		{"month", 30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH, typev3.RateLimitUnit_MONTH},
		{"year", 365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR, typev3.RateLimitUnit_YEAR},
	} {
		u, ok := unitNamed(tt.name)
		if !ok || u.period != tt.period || u.current != tt.current || u.override != tt.override {
			t.Errorf("unitNamed(%q) = %+v, %v", tt.name, u, ok)
		}
		if u, ok := unitOfPeriod(tt.period); !ok || u.name != tt.name {
			t.Errorf("unitOfPeriod(%v) = %+v, %v; want %s", tt.period, u, ok, tt.name)
		}
		if u, ok := unitOfOverride(tt.override); ok != (tt.override != typev3.RateLimitUnit_UNKNOWN) || ok && u.name != tt.name {
			t.Errorf("unitOfOverride(%v) = %+v, %v", tt.override, u, ok)
		}
	}
	for _, name := range []string{"fortnight", "Second", ""} {
		if _, ok := unitNamed(name); ok {
			t.Errorf("unitNamed(%q) found a unit", name)
		}
	}
	if _, ok := unitOfPeriod(90 * time.Second); ok {
		t.Error("unitOfPeriod(90s) found a unit")
	}
	if _, ok := unitOfOverride(typev3.RateLimitUnit(99)); ok {
		t.Error("unitOfOverride(99) found a unit")
	}
}

// TestLoadConfigTooLarge: a file over config.MaxFileBytes is refused by
// its size, unread, naming the file.
func TestLoadConfigTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(config.MaxFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cfg, err := LoadConfig(path)
	if !errors.Is(err, config.ErrFileTooLarge) || cfg != nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "over the limit of 4194304 bytes") {
		t.Errorf("LoadConfig of %d bytes: %v, %v; want config.ErrFileTooLarge naming the file and the limit", config.MaxFileBytes+1, cfg, err)
	}
}

// TestLookupJoinedAndExact: a key wildcard ("x-*", no value) matches the
// entry whose key, '_' and value start with "x-", as joining them would,
// an exact value wins over it, and neither costs the lookup an
// allocation (it runs for every entry of every request).
func TestLookupJoinedAndExact(t *testing.T) {
	idx, exact, joined := &node{}, &node{}, &node{}
	long := strings.Repeat("v", 40) // past the stack buffer of a string concatenation
	idx.add(&Descriptor{Key: "remote_address", Value: long}, exact)
	idx.add(&Descriptor{Key: "x-*"}, joined)
	idx.add(&Descriptor{Key: "ab_c*"}, joined)
	for _, tc := range []struct {
		key, value string
		want       *node
	}{
		{"remote_address", long, exact},
		{"remote_address", long + "w", nil},
		{"x-user", long, joined},
		{"x-", "", joined},
		{"x", "-y", nil}, // "x_-y": the '_' is not the '-'
		{"ab", "c", joined},
		{"ab", "cd", joined},
		{"ab", "b", nil},
		{"abc", "", nil},
		{"a", "b_c", nil}, // "a_b_c" does not start with "ab_c"
		{"ab_c", "", joined},
	} {
		if got, _ := idx.lookup(tc.key, tc.value); got != tc.want {
			t.Errorf("lookup(%q, %q) = %p, want %p (exact %p, joined %p)", tc.key, tc.value, got, tc.want, exact, joined)
		}
	}
	for _, e := range []Entry{{"remote_address", long}, {"x-user", long}} {
		if n := testing.AllocsPerRun(100, func() { idx.lookup(e.Key, e.Value) }); n != 0 {
			t.Errorf("lookup(%q, %q): %v allocations, want 0", e.Key, e.Value, n)
		}
	}
}
