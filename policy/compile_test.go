package policy_test

import (
	"errors"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

// compileErrorTests hold one row per problem Compile's doc comment lists:
// the rules and options, and what the error must say (the rule it names
// first, then the problem).
var compileErrorTests = []struct {
	name  string
	rules []policy.Rule
	opts  []policy.Option
	want  []string // substrings of the one error, in order
	is    error    // errors.Is must hold, when not nil
}{
	{name: "no name",
		rules: []policy.Rule{{Limits: perHour(1)}},
		want:  []string{`policy: rules[0]: name "" is not valid; a name holds letters, digits, '-', '_' and '.'`}},
	{name: "invalid name",
		rules: []policy.Rule{{Name: "my rule", Limits: perHour(1)}},
		want:  []string{`policy: rule "my rule": name "my rule" is not valid`}},
	{name: "plan without a name",
		rules: []policy.Rule{{Name: "r", Limits: perHour(1), Plans: []policy.Plan{{Keys: []string{"k"}, Limits: perHour(2)}}}},
		want:  []string{`policy: rule "r": plans[0]: name "" is not valid`}},
	{name: "plan with an invalid name",
		rules: []policy.Rule{{Name: "r", Limits: perHour(1), Plans: []policy.Plan{{Name: "pro plan", Keys: []string{"k"}, Limits: perHour(2)}}}},
		want:  []string{`policy: rule "r": plans[0]: name "pro plan" is not valid`}},
	{name: "two plans with one name",
		rules: []policy.Rule{{Name: "r", Limits: perHour(1), Plans: []policy.Plan{
			{Name: "pro", Keys: []string{"k1"}, Limits: perHour(2)},
			{Name: "pro", Keys: []string{"k2"}, Limits: perHour(3)},
		}}},
		want: []string{`policy: rule "r": plans[1]: another plan of the rule is named "pro"`}},
	{name: "two rules with one name",
		rules: []policy.Rule{{Name: "r", Match: "/a", Limits: perHour(1)}, {Name: "r", Match: "/b", Limits: perHour(1)}},
		want:  []string{`policy: rule "r": another rule has this name; rule names are unique`}},
	{name: "no limits",
		rules: []policy.Rule{{Name: "r"}},
		want:  []string{`policy: rule "r": limits has no limits`}},
	{name: "plan without limits",
		rules: []policy.Rule{{Name: "r", Limits: perHour(1), Plans: []policy.Plan{{Name: "pro", Keys: []string{"k"}}}}},
		want:  []string{`policy: rule "r": plan "pro" has no limits`}},
	{name: "invalid limit",
		rules: []policy.Rule{{Name: "r", Limits: []sluice.Limit{sluice.PerHour(0)}}},
		want:  []string{`policy: rule "r": limits: invalid limit (r-1h: token_bucket 0/1h0m0s): limit must be at least 1, got 0`},
		is:    sluice.ErrInvalidLimit},
	{name: "invalid limit of a plan",
		rules: []policy.Rule{{Name: "r", Limits: perHour(1), Plans: []policy.Plan{{Name: "pro", Keys: []string{"k"}, Limits: []sluice.Limit{sluice.Per(1, 0)}}}}},
		want:  []string{`policy: rule "r": plan "pro": invalid limit`, `period must be at least 1ms, got 0s`},
		is:    sluice.ErrInvalidLimit},
	{name: "cost above a limit's capacity",
		rules: []policy.Rule{{Name: "r", Cost: 6, Limits: []sluice.Limit{sluice.PerHour(10), sluice.PerMinute(5)}}},
		want:  []string{`policy: rule "r": limits: invalid cost: cost 6 exceeds the capacity 5 of r-1m`},
		is:    sluice.ErrInvalidCost},
	{name: "cost above a plan's capacity",
		rules: []policy.Rule{{Name: "r", Cost: 3, Limits: perHour(10), Plans: []policy.Plan{{Name: "free", Keys: []string{"k"}, Limits: perHour(2)}}}},
		want:  []string{`policy: rule "r": plan "free": invalid cost: cost 3 exceeds the capacity 2 of r-free-1h`},
		is:    sluice.ErrInvalidCost},
	{name: "negative cost",
		rules: []policy.Rule{{Name: "r", Cost: -1, Limits: perHour(10)}},
		want:  []string{`policy: rule "r": cost must be at least 1, got -1`}},
	{name: "limits of two rules with one name",
		rules: []policy.Rule{
			{Name: "a", Match: "/a", Limits: perHour(1), Plans: []policy.Plan{{Name: "b", Keys: []string{"k"}, Limits: perHour(2)}}},
			{Name: "a-b", Match: "/b", Limits: perHour(3)},
		},
		want: []string{`policy: rule "a-b": limit "a-b-1h" has the name of a limit of rule "a", so the two would share counts; rename one`}},
	{name: "limit named like another rule's",
		rules: []policy.Rule{
			{Name: "a", Match: "/a", Limits: perHour(1)},
			{Name: "b", Match: "/b", Limits: []sluice.Limit{sluice.PerDay(1).Named("a-1h")}},
		},
		want: []string{`policy: rule "b": limit "a-1h" has the name of a limit of rule "a"`}},
	{name: "header key without a name",
		rules: []policy.Rule{{Name: "r", Key: policy.Key{Source: policy.KeyHeader}, Limits: perHour(1)}},
		want:  []string{`policy: rule "r": key header has no name`}},
	{name: "query key without a name",
		rules: []policy.Rule{{Name: "r", Key: policy.Key{Source: policy.KeyQuery}, Limits: perHour(1)}},
		want:  []string{`policy: rule "r": key query has no name`}},
	{name: "unknown key source",
		rules: []policy.Rule{{Name: "r", Key: policy.Key{Source: policy.Source(9)}, Limits: perHour(1)}},
		want:  []string{`policy: rule "r": key source Source(9) is not one of ip, header:<Name>, query:<name>, global or request`}},
	{name: "missing key on an ip rule",
		rules: []policy.Rule{{Name: "r", MissingKey: policy.DenyMissing, Limits: perHour(1)}},
		want:  []string{`policy: rule "r": missing_key applies only to header and query keys, and this rule's key is ip`}},
	{name: "unknown missing key",
		rules: []policy.Rule{{Name: "r", Key: apiKey, MissingKey: policy.MissingKey(7), Limits: perHour(1)}},
		want:  []string{`policy: rule "r": missing key MissingKey(7) is not one of reject, deny, ip`}},
	{name: "request key with a match",
		rules: []policy.Rule{{Name: "r", Match: "/api/", Key: policy.Key{Source: policy.KeyRequest}, Limits: perHour(1)}},
		want:  []string{`policy: rule "r": match "/api/": a rule keyed by request takes the key its caller names (POST /v1/check, Envoy's gRPC) and is checked by name, never matched to an HTTP request; leave match out, or key the rule by ip, header:<Name>, query:<name> or global`}},
	{name: "request key in a group",
		rules: []policy.Rule{{Name: "r", Group: "svc", Key: policy.Key{Source: policy.KeyRequest}, Limits: perHour(1)}},
		want:  []string{`policy: rule "r": group "svc": a rule keyed by request takes the key its caller names (POST /v1/check, Envoy's gRPC) and is checked by name, never matched to an HTTP request, and in no group; leave group out`}},
	{name: "missing key on a request rule",
		rules: []policy.Rule{{Name: "r", Key: policy.Key{Source: policy.KeyRequest}, MissingKey: policy.IPIfMissing, Limits: perHour(1)}},
		want:  []string{`policy: rule "r": missing_key applies only to header and query keys, and this rule's key is request`}},
	{name: "WithKey of a request rule",
		rules: []policy.Rule{{Name: "r", Key: policy.Key{Source: policy.KeyRequest}, Limits: perHour(1)}},
		opts:  []policy.Option{policy.WithKey("r", func(*http.Request) (string, bool) { return "k", true })},
		want:  []string{`policy: WithKey names rule "r", and a rule keyed by request takes the key its caller names (POST /v1/check, Envoy's gRPC) and is checked by name, never matched to an HTTP request: its KeyFunc would never run`}},
	{name: "invalid group",
		rules: []policy.Rule{{Name: "r", Group: "per key", Limits: perHour(1)}},
		want:  []string{`policy: rule "r": group "per key" is not valid`}},
	{name: "malformed pattern",
		rules: []policy.Rule{{Name: "r", Match: "GET api", Limits: perHour(1)}},
		want:  []string{`policy: rule "r": match "GET api": at offset 4: host/path missing /`}},
	{name: "malformed wildcard",
		rules: []policy.Rule{{Name: "r", Match: "/a/{id", Limits: perHour(1)}},
		want:  []string{`policy: rule "r": match "/a/{id": at offset 3: bad wildcard segment (must end with '}')`}},
	{name: "two default rules in a group",
		rules: []policy.Rule{{Name: "a", Group: "g", Limits: perHour(1)}, {Name: "b", Group: "g", Limits: perHour(1)}},
		want:  []string{`policy: rule "b": it has no match, and neither has rule "a" of the same group; a group has one default rule`}},
	{name: "two default rules in the default group",
		rules: []policy.Rule{{Name: "a", Limits: perHour(1)}, {Name: "b", Limits: perHour(1)}},
		want:  []string{`policy: rule "b": it has no match, and neither has rule "a"`}},
	{name: "one pattern twice in a group",
		rules: []policy.Rule{{Name: "a", Match: "GET /x", Limits: perHour(1)}, {Name: "b", Match: "GET /x", Limits: perHour(1)}},
		want:  []string{`policy: rule "b": match "GET /x" conflicts with the match "GET /x" of rule "a" of the same group: GET /x matches the same requests as GET /x`}},
	{name: "conflicting patterns in a group",
		rules: []policy.Rule{{Name: "a", Group: "g", Match: "/a/{x}", Limits: perHour(1)}, {Name: "b", Group: "g", Match: "/{y}/b", Limits: perHour(1)}},
		want:  []string{`policy: rule "b": match "/{y}/b" conflicts with the match "/a/{x}" of rule "a" of the same group: /{y}/b and /a/{x} both match some paths, like "/a/b". But neither is more specific than the other.`}},
	{name: "IPv6 prefix of 0",
		rules: []policy.Rule{{Name: "r", Limits: perHour(1)}},
		opts:  []policy.Option{policy.WithIPv6Prefix(0)},
		want:  []string{`policy: the IPv6 prefix must be 1 to 128 bits, got 0`}},
	{name: "IPv6 prefix of 129",
		rules: []policy.Rule{{Name: "r", Limits: perHour(1)}},
		opts:  []policy.Option{policy.WithIPv6Prefix(129)},
		want:  []string{`policy: the IPv6 prefix must be 1 to 128 bits, got 129`}},
	{name: "WithKey naming no rule",
		rules: []policy.Rule{{Name: "r", Limits: perHour(1)}},
		opts:  []policy.Option{policy.WithKey("user", func(*http.Request) (string, bool) { return "", false })},
		want:  []string{`policy: WithKey names rule "user", which is not among the rules`}},
}

// TestCompileErrors: every problem is an error that names the rule (or
// the option) and says what is wrong; Compile never panics, not even on
// the patterns ServeMux panics on.
func TestCompileErrors(t *testing.T) {
	for _, tt := range compileErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := compile(t, tt.rules, tt.opts...)
			if err == nil {
				t.Fatalf("no error; compiled %d rules", len(set.Rules()))
			}
			if set != nil {
				t.Errorf("a RuleSet with the error")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("more than one error:\n%s", msg)
			}
			rest := msg
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error\n  %s\ndoes not say (in order)\n  %s", msg, strings.Join(tt.want, "\n  "))
				}
				rest = rest[i+len(w):]
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

// compile calls policy.Compile, failing t if it panics.
func compile(t *testing.T, rules []policy.Rule, opts ...policy.Option) (set *policy.RuleSet, err error) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			t.Fatalf("Compile panicked: %v", v)
		}
	}()
	return policy.Compile(rules, opts...)
}

// TestCompileAllErrors: Compile reports every problem at once.
func TestCompileAllErrors(t *testing.T) {
	rules := []policy.Rule{
		{Name: "a b", Limits: perHour(1)},
		{Name: "c", Match: "GET api", Limits: perHour(1)},
		{Name: "d", Match: "/d", Key: policy.Key{Source: policy.KeyHeader}, Limits: []sluice.Limit{sluice.PerHour(0)}},
	}
	_, err := compile(t, rules, policy.WithIPv6Prefix(200))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`IPv6 prefix`, `rule "a b": name`, `rule "c": match "GET api"`, `rule "d": key header has no name`, `rule "d": limits: invalid limit`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%s\nwant one saying %s", err, want)
		}
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 5 {
		t.Errorf("error is not the 5 errors joined: %v", err)
	}
}

// TestCompileAccepts rules that look alike but do not clash: groups stack
// instead, and one default rule per group is fine.
func TestCompileAccepts(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rules []policy.Rule
		opts  []policy.Option
	}{
		{"a default rule per group", []policy.Rule{
			{Name: "a", Limits: perHour(1)},
			{Name: "b", Group: "g", Limits: perHour(1)},
			{Name: "c", Group: "h", Limits: perHour(1)},
		}, nil},
		{"one pattern in two groups", []policy.Rule{
			{Name: "a", Match: "GET /x", Limits: perHour(1)},
			{Name: "b", Group: "g", Match: "GET /x", Limits: perHour(1)},
		}, nil},
		{"conflicting patterns in two groups", []policy.Rule{
			{Name: "a", Group: "g", Match: "/a/{x}", Limits: perHour(1)},
			{Name: "b", Group: "h", Match: "/{y}/b", Limits: perHour(1)},
		}, nil},
		{"a rule's own limits named alike", []policy.Rule{
			{Name: "a", Limits: []sluice.Limit{sluice.PerHour(1), sluice.PerHour(5).Using(sluice.FixedWindow)}},
		}, nil},
		{"a cost that fits", []policy.Rule{
			{Name: "a", Cost: 5, Limits: []sluice.Limit{sluice.PerHour(5)}},
		}, nil},
		{"IPv6 prefixes at the bounds", []policy.Rule{{Name: "a", Limits: perHour(1)}}, []policy.Option{policy.WithIPv6Prefix(1)}},
		{"IPv6 prefixes at the bounds", []policy.Rule{{Name: "a", Limits: perHour(1)}}, []policy.Option{policy.WithIPv6Prefix(128)}},
		{"no rules", nil, nil},
	} {
		if _, err := compile(t, tt.rules, tt.opts...); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// TestCompiledRules: Compile copies the rules, names their limits, sets
// the default cost and canonicalizes header names, leaving the caller's
// rules as they were.
func TestCompiledRules(t *testing.T) {
	rules := []policy.Rule{
		{Name: "login", Match: "POST /login", Limits: []sluice.Limit{sluice.PerMinute(5), sluice.PerHour(20)}},
		{Name: "search", Group: "key", Key: policy.Key{Source: policy.KeyHeader, Name: "x-api-key"}, Cost: 2, Limits: []sluice.Limit{sluice.PerSecond(5)},
			Plans: []policy.Plan{{Name: "pro", Keys: []string{"k"}, Limits: []sluice.Limit{sluice.PerSecond(50)}}}},
	}
	set, err := compile(t, rules, policy.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")))
	if err != nil {
		t.Fatal(err)
	}
	got := set.Rules()
	if len(got) != 2 || set.Rule("login") != got[0] || set.Rule("search") != got[1] || set.Rule("nope") != nil {
		t.Fatalf("Rules() = %v; Rule lookups disagree", got)
	}
	want := []policy.Rule{
		{Name: "login", Match: "POST /login", Cost: 1, Limits: []sluice.Limit{sluice.PerMinute(5).Named("login-1m"), sluice.PerHour(20).Named("login-1h")}},
		{Name: "search", Group: "key", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}, Cost: 2, Limits: []sluice.Limit{sluice.PerSecond(5).Named("search-1s")},
			Plans: []policy.Plan{{Name: "pro", Keys: []string{"k"}, Limits: []sluice.Limit{sluice.PerSecond(50).Named("search-pro-1s")}}}},
	}
	for i := range want {
		if !reflect.DeepEqual(*got[i], want[i]) {
			t.Errorf("rule %d =\n  %+v\nwant\n  %+v", i, *got[i], want[i])
		}
	}
	if rules[0].Cost != 0 || rules[0].Limits[0].Name != "" || rules[1].Key.Name != "x-api-key" || rules[1].Plans[0].Limits[0].Name != "" {
		t.Errorf("Compile changed the caller's rules: %+v", rules)
	}

	// The set is the rules as compiled: an engine keys the header rule by
	// its canonical name, whatever the request's spelling.
	f := newFixture(t, rules)
	r := request("GET", "/", "192.0.2.1")
	r.Header["X-API-KEY"] = []string{"k"} // not canonical: http.Header.Get would miss it
	r.Header.Set("x-api-key", "k")
	d := f.decide(r)
	if len(d.Applied) != 1 || d.Applied[0].Key != "k" || d.Applied[0].Limits[0].Name != "search-pro-1s" || d.Applied[0].Cost != 2 {
		t.Errorf("decided %+v, want search's pro plan for key k at cost 2", d.Applied)
	}
}
