package policy_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

// TestWithLimitNames: a rule built in code gets the names a policy file
// would give it; names it already has are kept, the generated ones avoid
// them, and the original rule's arrays are left unnamed.
func TestWithLimitNames(t *testing.T) {
	r := policy.Rule{
		Name: "r",
		Limits: []sluice.Limit{
			sluice.PerSecond(1), sluice.PerSecond(2), sluice.PerMinute(3).Named("r-1s-2"), sluice.PerMinute(4),
		},
		Plans: []policy.Plan{
			{Name: "pro", Keys: []string{"k"}, Limits: []sluice.Limit{sluice.PerSecond(10), sluice.PerSecond(20)}},
			{Keys: []string{"j"}, Limits: []sluice.Limit{sluice.PerSecond(5)}}, // no name: left alone
		},
	}
	orig := r
	r = r.WithLimitNames()
	if orig.Limits[0].Name != "" || orig.Plans[0].Limits[0].Name != "" {
		t.Errorf("WithLimitNames named the original's limits: %q, %q", orig.Limits[0].Name, orig.Plans[0].Limits[0].Name)
	}
	var got []string
	for _, ls := range [][]sluice.Limit{r.Limits, r.Plans[0].Limits, r.Plans[1].Limits} {
		for _, l := range ls {
			got = append(got, l.Name)
		}
	}
	want := []string{"r-1s", "r-1s-3", "r-1s-2", "r-1m", "r-pro-1s", "r-pro-1s-2", ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("names = %q\nwant    %q", got, want)
	}

	// A rule without a name has nothing to name its limits after.
	anon := policy.Rule{Limits: []sluice.Limit{sluice.PerSecond(1)}}
	anon = anon.WithLimitNames()
	if anon.Limits[0].Name != "" {
		t.Errorf("rule without a name: limit named %q", anon.Limits[0].Name)
	}
}

func TestCompactDuration(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{time.Microsecond, "1µs"},
		{time.Millisecond, "1ms"},
		{500 * time.Millisecond, "500ms"},
		{time.Second, "1s"},
		{10 * time.Second, "10s"},
		{1500 * time.Millisecond, "1.5s"},
		{time.Minute, "1m"},
		{10 * time.Minute, "10m"},
		{90 * time.Second, "1m30s"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + 30*time.Second, "1h30s"},
		{24 * time.Hour, "24h"},
		{100 * time.Hour, "100h"},
		{time.Hour + 500*time.Millisecond, "1h0.5s"},
	} {
		got := policy.CompactDuration(tt.d)
		if got != tt.want {
			t.Errorf("CompactDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
		if d, err := time.ParseDuration(got); err != nil || d != tt.d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", got, d, err, tt.d)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want bool
	}{
		{"login", true},
		{"api.v2_x-1", true},
		{"A", true},
		{"", false},
		{"my rule", false},
		{"a/b", false},
		{"a:b", false},
		{`a"b`, false}, // it would break the IETF headers' quoted names
		{"é", false},
	} {
		if got := policy.ValidName(tt.s); got != tt.want {
			t.Errorf("ValidName(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestLimitsFor(t *testing.T) {
	r := policy.Rule{
		Name:   "search",
		Limits: []sluice.Limit{sluice.PerSecond(5).Named("search-1s")},
		Plans: []policy.Plan{
			{Name: "pro", Keys: []string{"k1", "k2"}, Prefixes: []string{"sk_pro_"}, Limits: []sluice.Limit{sluice.PerSecond(50).Named("search-pro-1s")}},
			{Name: "team", Prefixes: []string{"sk_"}, Limits: []sluice.Limit{sluice.PerSecond(20).Named("search-team-1s")}},
		},
	}
	for _, tt := range []struct {
		key  string
		want string
	}{
		{"k1", "search-pro-1s"},
		{"k3", "search-1s"},
		{"k1x", "search-1s"},
		{"sk_pro_abc", "search-pro-1s"},
		{"sk_abc", "search-team-1s"}, // the first matching plan wins
		{"", "search-1s"},
	} {
		if ls := r.LimitsFor(tt.key); len(ls) != 1 || ls[0].Name != tt.want {
			t.Errorf("LimitsFor(%q) = %v, want %s", tt.key, ls, tt.want)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	for _, tt := range []struct {
		got, want string
	}{
		{policy.KeyIP.String(), "ip"},
		{policy.KeyHeader.String(), "header"},
		{policy.KeyQuery.String(), "query"},
		{policy.KeyGlobal.String(), "global"},
		{policy.Source(9).String(), "Source(9)"},
		{policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}.String(), "header:X-Api-Key"},
		{policy.Key{Source: policy.KeyQuery, Name: "api_key"}.String(), "query:api_key"},
		{policy.Key{}.String(), "ip"},
		{policy.RejectMissing.String(), "reject"},
		{policy.DenyMissing.String(), "deny"},
		{policy.IPIfMissing.String(), "ip"},
		{policy.MissingKey(7).String(), "MissingKey(7)"},
		{policy.Allowed.String(), "allowed"},
		{policy.DeniedByOther.String(), "denied_by_other"},
		{policy.ShadowDenied.String(), "shadow_denied"},
		{policy.DegradedDenied.String(), "degraded_denied"},
		{policy.Shed.String(), "shed"},
		{policy.Outcome(42).String(), "Outcome(42)"},
	} {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
	if len(policy.Outcomes) != 7 {
		t.Errorf("Outcomes has %d entries, want 7", len(policy.Outcomes))
	}
	for i, o := range policy.Outcomes {
		if int(o) != i {
			t.Errorf("Outcomes[%d] = %v", i, o)
		}
	}
}

// TestParseKey: every key a policy file may write parses to its Key, and
// prints back as written (but for a header name, canonicalized); every
// other text is an error that says what is wrong and what is accepted.
func TestParseKey(t *testing.T) {
	for _, tt := range []struct {
		in, want string // want: the Key's String, or the error
		err      bool
	}{
		{"ip", "ip", false},
		{"global", "global", false},
		{"request", "request", false},
		{"header:x-api-key", "header:X-Api-Key", false},
		{"query:api_key", "query:api_key", false},
		{"cookie:sid", `"cookie:sid" is not one of ip, header:<Name>, query:<name>, global or request`, true},
		{"IP", `"IP" is not one of ip, header:<Name>, query:<name>, global or request`, true},
		{"ip:x", `"ip:x" is not one of ip, header:<Name>, query:<name>, global or request`, true},
		{"request:user", `"request:user" is not one of ip, header:<Name>, query:<name>, global or request`, true},
		{"", `"" is not one of ip, header:<Name>, query:<name>, global or request`, true},
		{"header", `"header" has no header name; write header:<Name>, such as header:X-API-Key`, true},
		{"header:", `"header:" has no header name; write header:<Name>, such as header:X-API-Key`, true},
		{"query:", `"query:" has no parameter name; write query:<name>, such as query:api_key`, true},
		{"header:X API Key", "\"X API Key\" is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)", true},
		{"query:api key", `query parameter name "api key" holds a space or a control character`, true},
	} {
		k, err := policy.ParseKey(tt.in)
		switch {
		case tt.err && (err == nil || err.Error() != tt.want):
			t.Errorf("ParseKey(%q) = %v, %v; want the error %s", tt.in, k, err, tt.want)
		case !tt.err && (err != nil || k.String() != tt.want):
			t.Errorf("ParseKey(%q) = %v, %v; want %s", tt.in, k, err, tt.want)
		}
	}
}
