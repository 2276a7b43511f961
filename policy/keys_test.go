package policy_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestStoredKeys: every client key is stored in the namespace of its
// source, "ip:", "k:", "fn:" or "global", so that every door spends one
// count per rule and client, and state kept in Redis outlives a release.
func TestStoredKeys(t *testing.T) {
	user := func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-Test-User")
		return u, u != ""
	}
	for _, tt := range []struct {
		name   string
		rule   policy.Rule
		opts   []policy.Option
		remote string // an address, or "@" for a Unix socket
		target string
		header []string
		key    string // Applied.Key
		stored string
	}{
		{name: "ipv4", rule: policy.Rule{}, remote: "192.0.2.1", key: "192.0.2.1", stored: "ip:192.0.2.1"},
		{name: "ipv6 by its /64", rule: policy.Rule{}, remote: "2001:db8:1:2::5", key: "2001:db8:1:2::/64", stored: "ip:2001:db8:1:2::/64"},
		{name: "ipv6 by its /48", rule: policy.Rule{}, opts: []policy.Option{policy.WithIPv6Prefix(48)}, remote: "2001:db8:1:2::5", key: "2001:db8:1::/48", stored: "ip:2001:db8:1::/48"},
		{name: "ipv6 whole", rule: policy.Rule{}, opts: []policy.Option{policy.WithIPv6Prefix(128)}, remote: "2001:db8:1:2::5", key: "2001:db8:1:2::5", stored: "ip:2001:db8:1:2::5"},
		{name: "ipv4-mapped", rule: policy.Rule{}, remote: "::ffff:192.0.2.1", key: "192.0.2.1", stored: "ip:192.0.2.1"},
		{name: "unix socket", rule: policy.Rule{}, remote: "@", key: "unknown", stored: "ip:unknown"},
		{name: "behind a trusted proxy", rule: policy.Rule{}, opts: []policy.Option{policy.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))},
			remote: "10.0.0.1", header: []string{"X-Forwarded-For", "203.0.113.9, 198.51.100.7"}, key: "198.51.100.7", stored: "ip:198.51.100.7"},
		{name: "X-Forwarded-For from an untrusted peer", rule: policy.Rule{}, opts: []policy.Option{policy.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))},
			remote: "192.0.2.1", header: []string{"X-Forwarded-For", "198.51.100.7"}, key: "192.0.2.1", stored: "ip:192.0.2.1"},
		{name: "IPv6 behind a trusted proxy", rule: policy.Rule{}, opts: []policy.Option{policy.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))},
			remote: "10.0.0.1", header: []string{"X-Forwarded-For", "2001:db8:9:9::1"}, key: "2001:db8:9:9::/64", stored: "ip:2001:db8:9:9::/64"},
		{name: "header", rule: policy.Rule{Key: apiKey}, remote: "192.0.2.1", header: []string{"X-API-Key", "abc"}, key: "abc", stored: "k:abc"},
		{name: "query", rule: policy.Rule{Key: policy.Key{Source: policy.KeyQuery, Name: "api_key"}}, remote: "192.0.2.1", target: "/?api_key=abc", key: "abc", stored: "k:abc"},
		{name: "header missing, by address", rule: policy.Rule{Key: apiKey, MissingKey: policy.IPIfMissing}, remote: "192.0.2.1", key: "192.0.2.1", stored: "ip:192.0.2.1"},
		{name: "global", rule: policy.Rule{Key: policy.Key{Source: policy.KeyGlobal}}, remote: "192.0.2.1", key: "global", stored: "global"},
		{name: "WithKey", rule: policy.Rule{}, opts: []policy.Option{policy.WithKey("r", user)}, remote: "192.0.2.1", header: []string{"X-Test-User", "alice"}, key: "alice", stored: "fn:alice"},
		{name: "WithKey without a key", rule: policy.Rule{}, opts: []policy.Option{policy.WithKey("r", user)}, remote: "192.0.2.1", key: "192.0.2.1", stored: "ip:192.0.2.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := storetest.NewClock()
			lim := sluice.New(memory.New(memory.WithClock(clock.Now)), sluice.WithClock(clock.Now))
			rule := tt.rule
			rule.Name, rule.Limits = "r", perHour(5)
			f := newFixtureOn(t, lim, clock, []policy.Rule{rule}, tt.opts...)
			target := tt.target
			if target == "" {
				target = "/"
			}
			r := request("GET", target, tt.remote, tt.header...)
			if tt.remote == "@" {
				r.RemoteAddr = "@"
			}
			d := f.decide(r)
			if !d.Allowed || len(d.Applied) != 1 || d.Applied[0].Key != tt.key {
				t.Fatalf("decided %+v, want allowed with key %q", d.Applied, tt.key)
			}
			res, err := lim.AllowAll(context.Background(), tt.stored, 0, f.e.Rules().Rule("r").Limits...)
			if err != nil {
				t.Fatal(err)
			}
			if res.Remaining != 4 {
				t.Errorf("key %q has %d left, want 4: the request was not stored under it", tt.stored, res.Remaining)
			}
		})
	}
}

// TestNamespaces: a client cannot pick a header value that shares a
// count with another client's address, nor the reverse.
func TestNamespaces(t *testing.T) {
	f := newFixture(t, []policy.Rule{{Name: "api", Key: apiKey, MissingKey: policy.IPIfMissing, Limits: perHour(1)}})
	for i, tt := range []struct {
		remote, header string // header "": none, keyed by address
		allowed        bool
	}{
		{"192.0.2.1", "", true},
		{"192.0.2.7", "192.0.2.1", true}, // the header value is not the address
		{"192.0.2.1", "", false},
		{"192.0.2.7", "192.0.2.1", false},
	} {
		var hdr []string
		if tt.header != "" {
			hdr = []string{"X-API-Key", tt.header}
		}
		if d := f.decide(request("GET", "/", tt.remote, hdr...)); d.Allowed != tt.allowed {
			t.Errorf("step %d: %s with key %q: allowed %v, want %v", i, tt.remote, tt.header, d.Allowed, tt.allowed)
		}
	}
	// A Check of a header rule names a header value: the second count.
	f = newFixture(t, []policy.Rule{{Name: "api", Key: apiKey, MissingKey: policy.IPIfMissing, Limits: perHour(1)}})
	f.decide(request("GET", "/", "192.0.2.1"))
	if got := f.remaining("api", "192.0.2.1"); !slices.Equal(got, []int{1}) {
		t.Errorf("Check(api, 192.0.2.1) after a keyless request from 192.0.2.1: %v left, want [1]", got)
	}
}

// TestIPv6Prefix: an ip rule keys an IPv6 client by its prefix, and a
// Check given any address of that prefix (or the prefix itself, as
// Applied.Key reports it) spends the same count as Decide; IPv4 clients
// are keyed by their whole address.
func TestIPv6Prefix(t *testing.T) {
	type step struct {
		check   bool   // Check; else Decide
		addr    string // the client's address, or the Check's key
		allowed bool
	}
	for _, tt := range []struct {
		name  string
		opts  []policy.Option
		steps []step
	}{
		{"default /64", nil, []step{
			{false, "2001:db8:1:2::1", true},
			{true, "2001:db8:1:2:aaaa:bbbb:cccc:dddd", true},
			{false, "2001:db8:1:2:ffff:ffff:ffff:ffff", true},
			{true, "2001:db8:1:2::/64", false},
			{true, "2001:db8:1:2::9%eth0", false},
			{false, "2001:db8:1:2::2", false},
			{false, "2001:db8:1:3::1", true}, // the next /64
			{true, "2001:db8:1:3::/64", true},
		}},
		{"/56", []policy.Option{policy.WithIPv6Prefix(56)}, []step{
			{false, "2001:db8:1:200::1", true},
			{true, "2001:db8:1:2ff:ffff::1", true},
			{false, "2001:db8:1:250::9", true},
			{true, "2001:db8:1:2aa::", false},
			{false, "2001:db8:1:2ff::1", false},
			{true, "2001:db8:1:200::/56", false},
			{false, "2001:db8:1:300::1", true}, // the next /56
		}},
		{"/128", []policy.Option{policy.WithIPv6Prefix(128)}, []step{
			{false, "2001:db8::1", true},
			{true, "2001:db8::1", true},
			{true, "2001:db8::1/128", true},
			{false, "2001:db8::1", false},
			{false, "2001:db8::2", true},
		}},
		{"IPv4 by address", nil, []step{
			{false, "192.0.2.1", true},
			{true, "::ffff:192.0.2.1", true},
			{true, "192.0.2.1", true},
			{false, "192.0.2.1", false},
			{false, "192.0.2.2", true},
			{true, "192.0.2.3", true},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []policy.Rule{{Name: "r", Limits: perHour(3)}}, tt.opts...)
			for i, s := range tt.steps {
				var d *policy.Decision
				if s.check {
					var err error
					d, err = f.e.Check(context.Background(), policy.Check{Rule: "r", Key: s.addr})
					if err != nil {
						t.Fatalf("step %d: Check(%q): %v", i, s.addr, err)
					}
				} else {
					d = f.decide(request("GET", "/", s.addr))
				}
				if d.Allowed != s.allowed {
					t.Errorf("step %d: %s %s: allowed %v, want %v", i, map[bool]string{true: "Check", false: "Decide"}[s.check], s.addr, d.Allowed, s.allowed)
				}
			}
		})
	}
}

// TestCheckInvalidKey: a Check key that the rule's source could not have
// produced is refused with ErrInvalidKey, and nothing is spent.
func TestCheckInvalidKey(t *testing.T) {
	rules := []policy.Rule{
		{Name: "ip", Limits: perHour(1)},
		{Name: "header", Match: "/h", Key: apiKey, Limits: perHour(1)},
		{Name: "query", Match: "/q", Key: policy.Key{Source: policy.KeyQuery, Name: "k"}, Limits: perHour(1)},
	}
	for _, tt := range []struct {
		rule, key string
		opts      []policy.Option
	}{
		{"ip", "alice", nil},
		{"ip", "", nil},
		{"ip", "unknown", nil},
		{"ip", "192.0.2.1:80", nil},
		{"ip", "192.0.2.0/24", nil},
		{"ip", "2001:db8::/48", nil}, // not the set's prefix length
		{"ip", "2001:db8::/64", []policy.Option{policy.WithIPv6Prefix(56)}}, // nor here
		{"header", "", nil},
		{"query", "", nil},
		{"header", "ab\xffc", nil}, // not UTF-8: JSON would have made it "ab\ufffdc"
		{"query", "\xc3", nil},
		{"ip", "\xff", nil},
	} {
		f := newFixture(t, rules, tt.opts...)
		d, err := f.e.Check(context.Background(), policy.Check{Rule: tt.rule, Key: tt.key})
		if !errors.Is(err, policy.ErrInvalidKey) || d != nil {
			t.Errorf("Check(%s, %q): %v, %v; want ErrInvalidKey", tt.rule, tt.key, d, err)
		}
		if got := f.outcomes(); got != nil {
			t.Errorf("Check(%s, %q): observer told %q", tt.rule, tt.key, got)
		}
	}
	// Keys a header or query rule takes as they are, addresses included,
	// and U+FFFD itself, which is valid UTF-8.
	f := newFixture(t, rules)
	for _, key := range []string{"192.0.2.1", "alice", "unknown", "a b:{c}", "ab\ufffdc", "ключ"} {
		if _, err := f.e.Check(context.Background(), policy.Check{Rule: "header", Key: key}); err != nil {
			t.Errorf("Check(header, %q): %v", key, err)
		}
	}
}

// TestPlanKeys: a plan of an ip rule lists addresses, and IPv6 prefixes
// as Applied.Key reports them.
func TestPlanKeys(t *testing.T) {
	rules := []policy.Rule{{
		Name: "r", Limits: perHour(1),
		Plans: []policy.Plan{
			{Name: "office", Keys: []string{"2001:db8:1:2::/64", "192.0.2.10"}, Limits: perHour(5)},
			{Name: "lan", Prefixes: []string{"10."}, Limits: perHour(3)},
		},
	}}
	f := newFixture(t, rules)
	for _, tt := range []struct {
		remote string
		limit  string
	}{
		{"2001:db8:1:2::77", "r-office-1h"},
		{"192.0.2.10", "r-office-1h"},
		{"10.1.2.3", "r-lan-1h"},
		{"192.0.2.11", "r-1h"},
		{"2001:db8:1:3::77", "r-1h"},
	} {
		d := f.decide(request("GET", "/", tt.remote))
		if got := limitNames(d); !slices.Equal(got, []string{tt.limit}) {
			t.Errorf("%s: limits %q, want [%s]", tt.remote, got, tt.limit)
		}
	}
	// A query key arrives decoded.
	f = newFixture(t, []policy.Rule{{Name: "q", Key: policy.Key{Source: policy.KeyQuery, Name: "api_key"},
		Limits: perHour(1), Plans: []policy.Plan{{Name: "pro", Keys: []string{"a b&c"}, Limits: perHour(5)}}}})
	d := f.decide(request("GET", "/?api_key="+url.QueryEscape("a b&c"), "192.0.2.1"))
	if got := limitNames(d); !slices.Equal(got, []string{"q-pro-1h"}) || d.Applied[0].Key != "a b&c" {
		t.Errorf("query key: limits %q key %q, want [q-pro-1h] and %q", got, d.Applied[0].Key, "a b&c")
	}
}

// TestDecideInvalidUTF8Key: a header or query key that is not valid UTF-8
// is ErrInvalidKey, naming the rule and its key source, before anything
// is decided, whatever missing_key says; a shadow rule ignores it.
func TestDecideInvalidUTF8Key(t *testing.T) {
	query := policy.Key{Source: policy.KeyQuery, Name: "k"}
	for _, tt := range []struct {
		name   string
		rule   policy.Rule
		target string
		header []string
		want   string // "" for no error
	}{
		{name: "header", rule: policy.Rule{Key: apiKey}, header: []string{"X-API-Key", "a\xffb"}, want: `rule "r" is keyed by header:X-Api-Key, and its value is not valid UTF-8`},
		{name: "header, ip if missing", rule: policy.Rule{Key: apiKey, MissingKey: policy.IPIfMissing}, header: []string{"X-API-Key", "\xe2\x82"}, want: "not valid UTF-8"},
		{name: "query, percent-encoded", rule: policy.Rule{Key: query}, target: "/?k=%FF%FE", want: `rule "r" is keyed by query:k, and its value is not valid UTF-8`},
		{name: "header U+FFFD is a key", rule: policy.Rule{Key: apiKey}, header: []string{"X-API-Key", "a\ufffdb"}},
		{name: "query U+FFFD is a key", rule: policy.Rule{Key: query}, target: "/?k=%EF%BF%BD"},
		{name: "shadow", rule: policy.Rule{Key: apiKey, Shadow: true}, header: []string{"X-API-Key", "\xff"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rule := tt.rule
			rule.Name, rule.Limits = "r", perHour(1)
			f := newFixture(t, []policy.Rule{rule})
			target := tt.target
			if target == "" {
				target = "/"
			}
			d, err := f.e.Decide(request("GET", target, "192.0.2.1", tt.header...))
			if tt.want == "" {
				if err != nil || !d.Allowed {
					t.Fatalf("Decide: %+v, %v; want allowed", d, err)
				}
				return
			}
			if !errors.Is(err, policy.ErrInvalidKey) || d != nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decide: %+v, %v; want ErrInvalidKey saying %q", d, err, tt.want)
			}
			if got := f.outcomes(); got != nil {
				t.Errorf("observer told %q; nothing should be decided", got)
			}
		})
	}
	// Distinct invalid keys would have shared one bucket as U+FFFD; the
	// valid U+FFFD key keeps its own count.
	f := newFixture(t, []policy.Rule{{Name: "r", Key: apiKey, Limits: perHour(1)}})
	if d := f.decide(request("GET", "/", "192.0.2.1", "X-API-Key", "\ufffd")); !d.Allowed {
		t.Fatalf("first U+FFFD key denied")
	}
	if _, err := f.e.Decide(request("GET", "/", "192.0.2.1", "X-API-Key", "\xff")); !errors.Is(err, policy.ErrInvalidKey) {
		t.Errorf("\\xff after U+FFFD: %v, want ErrInvalidKey", err)
	}
}

func TestMaskKey(t *testing.T) {
	a, b := policy.MaskKey("203.0.113.7"), policy.MaskKey("203.0.113.8")
	if len(a) != 13 || a[0] != '#' || a == b || a != policy.MaskKey("203.0.113.7") {
		t.Fatalf("MaskKey: %q, %q", a, b)
	}
	if strings.Contains(a, "203") {
		t.Fatalf("MaskKey(%q) = %q shows the key", "203.0.113.7", a)
	}
}

// TestIsMaskedKey: what MaskKey returns has the form of a masked key, and
// text of any other form has not.
func TestIsMaskedKey(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want bool
	}{
		{policy.MaskKey("203.0.113.7"), true},
		{policy.MaskKey(""), true},
		{"#0123456789ab", true},
		{"#0123456789AB", false}, // MaskKey writes lower case
		{"#0123456789a", false},
		{"#0123456789abc", false},
		{"0123456789abc", false},
		{"#0123456789ag", false},
		{"", false},
		{"#", false},
	} {
		if got := policy.IsMaskedKey(tt.s); got != tt.want {
			t.Errorf("IsMaskedKey(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}
