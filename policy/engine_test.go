package policy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// fixture is an Engine over the memory store with a fake clock that
// stands still (so nothing refills), recording what its observer is told
// and what it logs (every denial: WithDenialLog(1)).
type fixture struct {
	t     *testing.T
	e     *policy.Engine
	clock *storetest.Clock
	logs  bytes.Buffer

	mu   sync.Mutex
	seen []string // "rule=outcome", since the last call of outcomes
	keys []string // the client key of each of seen
}

// newFixture compiles rules with opts, failing t if they do not compile,
// and returns an engine deciding under them on the memory store.
func newFixture(t *testing.T, rules []policy.Rule, opts ...policy.Option) *fixture {
	t.Helper()
	clock := storetest.NewClock()
	lim := sluice.New(memory.New(memory.WithClock(clock.Now)), sluice.WithClock(clock.Now))
	return newFixtureOn(t, lim, clock, rules, opts...)
}

// newFixtureOn is newFixture on lim.
func newFixtureOn(t *testing.T, lim *sluice.Limiter, clock *storetest.Clock, rules []policy.Rule, opts ...policy.Option) *fixture {
	t.Helper()
	set, err := policy.Compile(rules, opts...)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	f := &fixture{t: t, clock: clock}
	f.e = policy.New(lim, set, policy.WithObserver(f.observe), policy.WithLogger(slog.New(slog.NewTextHandler(&f.logs, nil))), policy.WithDenialLog(1))
	return f
}

func (f *fixture) observe(rule, key string, o policy.Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, rule+"="+o.String())
	f.keys = append(f.keys, key)
}

// outcomes returns what the observer was told since the last call.
func (f *fixture) outcomes() []string {
	seen, _ := f.observed()
	return seen
}

// observed returns what the observer was told since the last call of it
// or outcomes, and the client key of each.
func (f *fixture) observed() (seen, keys []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen, keys = f.seen, f.keys
	f.seen, f.keys = nil, nil
	return seen, keys
}

// decide decides r, failing the test on an error.
func (f *fixture) decide(r *http.Request) *policy.Decision {
	f.t.Helper()
	d, err := f.e.Decide(r)
	if err != nil {
		f.t.Fatalf("Decide(%s %s): %v", r.Method, r.URL, err)
	}
	return d
}

// remaining returns what rule has left for key, limit by limit, from a
// Check of cost 0, which spends nothing; the observer forgets it.
func (f *fixture) remaining(rule, key string) []int {
	f.t.Helper()
	defer f.outcomes()
	zero := 0
	d, err := f.e.Check(context.Background(), policy.Check{Rule: rule, Key: key, Cost: &zero})
	if err != nil {
		f.t.Fatalf("Check(%s, %q, cost 0): %v", rule, key, err)
	}
	var left []int
	for _, r := range d.Applied[0].Results {
		left = append(left, r.Remaining)
	}
	return left
}

// request returns a request for method and target from address ip (with
// a port), with header name-value pairs.
func request(method, target, ip string, header ...string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = net.JoinHostPort(ip, "40000")
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

// madeUpKeys sends 12 searches from addr under stackRules, each with an
// API key of its own, and returns how many were admitted. Each denied one
// is denied by per-ip alone (per-key would have admitted it) and spends
// nothing of its key's count.
func madeUpKeys(t *testing.T, f *fixture, addr string) (admitted int) {
	t.Helper()
	for i := range 12 {
		key := fmt.Sprintf("made-up-%d", i)
		d := f.decide(request("GET", "/api/search", addr, "X-API-Key", key))
		if d.Allowed {
			admitted++
			continue
		}
		if got := d.Violated(); !slices.Equal(got, []string{"per-ip-1h"}) {
			t.Errorf("key %d: violated %q, want [per-ip-1h]", i, got)
		}
		if got, want := f.outcomes(), []string{"per-ip=denied", "per-key=denied_by_other"}; len(got) < 2 || !reflect.DeepEqual(got[len(got)-2:], want) {
			t.Errorf("key %d: outcomes %q, want %q", i, got, want)
		}
		// The key's own count is untouched.
		if got := f.remaining("per-key", key); !slices.Equal(got, []int{5}) {
			t.Errorf("key %d: per-key has %v left, want [5]: a denied request spends nothing", i, got)
		}
	}
	return admitted
}

// applied returns the names of the rules of d.
func applied(d *policy.Decision) []string {
	var names []string
	for _, a := range d.Applied {
		names = append(names, a.Rule.Name)
	}
	return names
}

// limitNames returns the names of the limits of d.Limits.
func limitNames(d *policy.Decision) []string {
	ls, _, _ := d.Limits()
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	return names
}

func perHour(n int) []sluice.Limit { return []sluice.Limit{sluice.PerHour(n)} }

var apiKey = policy.Key{Source: policy.KeyHeader, Name: "X-API-Key"}

// TestPrecedence: within a group the most specific pattern applies, as
// http.ServeMux chooses it, and the group's default rule applies to the
// rest; a path ServeMux would redirect is matched as its target, so that
// its spelling cannot dodge its rule.
func TestPrecedence(t *testing.T) {
	rules := []policy.Rule{
		{Name: "default", Limits: perHour(100)},
		{Name: "api", Match: "/api/", Limits: perHour(100)},
		{Name: "search", Match: "GET /api/search", Limits: perHour(100)},
		{Name: "item", Match: "/api/items/{id}", Limits: perHour(100)},
		{Name: "login", Match: "POST /api/login", Limits: perHour(100)},
		{Name: "home", Match: "/{$}", Limits: perHour(100)},
		{Name: "admin", Match: "admin.example.com/", Limits: perHour(100)},
	}
	f := newFixture(t, rules)
	mux := http.NewServeMux()
	for _, r := range rules {
		if r.Match == "" {
			mux.Handle("/", ruleName(r.Name))
		} else {
			mux.Handle(r.Match, ruleName(r.Name))
		}
	}
	for _, tt := range []struct {
		method, target string
		want           string
	}{
		{"GET", "/api/search", "search"},
		{"HEAD", "/api/search", "search"}, // GET patterns match HEAD
		{"POST", "/api/search", "api"},
		{"GET", "/api/search/more", "api"},
		{"GET", "/api/items/7", "item"},
		{"DELETE", "/api/items/7", "item"},
		{"GET", "/api/items/7/parts", "api"},
		{"POST", "/api/login", "login"},
		{"GET", "/api/login", "api"}, // not POST: the next most specific
		{"GET", "/", "home"},
		{"GET", "/elsewhere", "default"},
		{"GET", "http://admin.example.com/", "admin"},
		{"GET", "http://admin.example.com/api/search", "admin"}, // ServeMux: a pattern with a host wins over one without
		{"GET", "http://admin.example.com/x", "admin"},
		// What ServeMux would redirect: cleaned, or with its slash.
		{"GET", "//api/search", "search"},
		{"GET", "/api/./search", "search"},
		{"GET", "/api/../api/search", "search"},
		{"POST", "/x/../api/login", "login"},
		{"GET", "/api", "api"},
	} {
		d := f.decide(request(tt.method, tt.target, "192.0.2.1"))
		if got := applied(d); !reflect.DeepEqual(got, []string{tt.want}) {
			t.Errorf("%s %s: rules %q, want [%s]", tt.method, tt.target, got, tt.want)
		}
		// The control: a ServeMux with the same patterns agrees (after
		// following its redirect, for a path it would redirect).
		if got := muxRule(mux, tt.method, tt.target); got != tt.want {
			t.Errorf("%s %s: ServeMux chooses %s, the test wants %s", tt.method, tt.target, got, tt.want)
		}
	}

	// Without a default rule, a request no pattern matches is unlimited.
	f = newFixture(t, rules[1:])
	d := f.decide(request("GET", "/elsewhere", "192.0.2.1"))
	if !d.Allowed || len(d.Applied) != 0 || d.Limited() || d.Missing != nil {
		t.Errorf("unmatched request: %+v, want allowed with no rule", d)
	}
	if got := f.outcomes(); got != nil {
		t.Errorf("unmatched request: observer told %q", got)
	}
}

// ruleName is a handler that writes its rule's name.
type ruleName string

func (n ruleName) ServeHTTP(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, string(n)) }

// muxRule returns the name mux serves for method and target, following
// one redirect.
func muxRule(mux *http.ServeMux, method, target string) string {
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	if loc := w.Header().Get("Location"); w.Code/100 == 3 && loc != "" {
		w = httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(method, loc, nil))
	}
	return w.Body.String()
}

// stackRules are three groups over an API: a per-address rule on
// everything, a per-API-key rule on /api/, and the strictest on login.
func stackRules() []policy.Rule {
	return []policy.Rule{
		{Name: "per-ip", Group: "ip", Limits: perHour(10)},
		{Name: "per-key", Group: "key", Match: "/api/", Key: apiKey, Limits: perHour(5)},
		{Name: "login", Match: "POST /api/login", Limits: perHour(2)},
	}
}

// TestStacking: a request is limited by the matching rule of every group
// at once, and admitted only if all of them admit it.
func TestStacking(t *testing.T) {
	t.Run("login is limited by all three", func(t *testing.T) {
		f := newFixture(t, stackRules())
		for i, tt := range []struct {
			allowed   bool
			remaining int      // of the binding limit
			violated  []string // limits that denied
			outcomes  []string
		}{
			{true, 1, nil, []string{"per-ip=allowed", "per-key=allowed", "login=allowed"}},
			{true, 0, nil, []string{"per-ip=allowed", "per-key=allowed", "login=allowed"}},
			{false, 0, []string{"login-1h"}, []string{"per-ip=denied_by_other", "per-key=denied_by_other", "login=denied"}},
		} {
			d := f.decide(request("POST", "/api/login", "192.0.2.1", "X-API-Key", "k1"))
			if got, want := applied(d), []string{"per-ip", "per-key", "login"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d: rules %q, want %q", i, got, want)
			}
			if got, want := limitNames(d), []string{"per-ip-1h", "per-key-1h", "login-1h"}; !reflect.DeepEqual(got, want) {
				t.Errorf("step %d: limits %q, want %q", i, got, want)
			}
			if d.Allowed != tt.allowed || d.Result().Remaining != tt.remaining || !slices.Equal(d.Violated(), tt.violated) {
				t.Errorf("step %d: allowed %v remaining %d violated %q; want %v %d %q", i, d.Allowed, d.Result().Remaining, d.Violated(), tt.allowed, tt.remaining, tt.violated)
			}
			if got := f.outcomes(); !reflect.DeepEqual(got, tt.outcomes) {
				t.Errorf("step %d: outcomes %q, want %q", i, got, tt.outcomes)
			}
		}
		// The denied login spent from none of the three.
		if got := f.remaining("per-ip", "192.0.2.1"); !slices.Equal(got, []int{8}) {
			t.Errorf("per-ip has %v left, want [8]", got)
		}
		if got := f.remaining("per-key", "k1"); !slices.Equal(got, []int{3}) {
			t.Errorf("per-key has %v left, want [3]", got)
		}
		if got := f.remaining("login", "192.0.2.1"); !slices.Equal(got, []int{0}) {
			t.Errorf("login has %v left, want [0]", got)
		}
		// Other paths of the API are still open to this address and key.
		if d := f.decide(request("GET", "/api/search", "192.0.2.1", "X-API-Key", "k1")); !d.Allowed || !slices.Equal(applied(d), []string{"per-ip", "per-key"}) {
			t.Errorf("search after login's limit: allowed %v under %q, want allowed under per-ip and per-key", d.Allowed, applied(d))
		}
	})

	t.Run("made-up API keys from one address", func(t *testing.T) {
		if admitted := madeUpKeys(t, newFixture(t, stackRules()), "192.0.2.1"); admitted != 10 {
			t.Errorf("12 made-up keys from one address: %d admitted, want 10 (the per-ip limit)", admitted)
		}
	})

	t.Run("one API key from many addresses", func(t *testing.T) {
		f := newFixture(t, stackRules())
		admitted := 0
		for i := range 8 {
			d := f.decide(request("GET", "/api/search", fmt.Sprintf("192.0.2.%d", i+1), "X-API-Key", "shared"))
			if d.Allowed {
				admitted++
			} else if got := d.Violated(); !slices.Equal(got, []string{"per-key-1h"}) {
				t.Errorf("address %d: violated %q, want [per-key-1h]", i, got)
			}
		}
		if admitted != 5 {
			t.Errorf("one key from 8 addresses: %d admitted, want 5 (the per-key limit)", admitted)
		}
	})
}

// TestDeniedSpendsNothing: when any rule of a stacked request denies,
// none of the rules spends, whichever group denied, and a request within
// every limit spends from each.
func TestDeniedSpendsNothing(t *testing.T) {
	rules := []policy.Rule{
		{Name: "a", Group: "a", Limits: []sluice.Limit{sluice.PerHour(3), sluice.PerDay(10)}},
		{Name: "b", Group: "b", Key: apiKey, Limits: perHour(1)},
		{Name: "c", Group: "c", Key: policy.Key{Source: policy.KeyGlobal}, Limits: []sluice.Limit{sluice.PerHour(5).Using(sluice.FixedWindow)}},
	}
	f := newFixture(t, rules)
	if d := f.decide(request("GET", "/", "192.0.2.1", "X-API-Key", "k")); !d.Allowed {
		t.Fatalf("first request denied: %q", d.Violated())
	}
	// b denies k from now on: a and c must not move.
	for range 3 {
		if d := f.decide(request("GET", "/", "192.0.2.1", "X-API-Key", "k")); d.Allowed || !slices.Equal(d.Violated(), []string{"b-1h"}) {
			t.Fatalf("request over b: allowed %v violated %q, want denied by b-1h", d.Allowed, d.Violated())
		}
	}
	for _, tt := range []struct {
		rule, key string
		want      []int
	}{
		{"a", "192.0.2.1", []int{2, 9}},
		{"b", "k", []int{0}},
		{"c", "", []int{4}},
	} {
		if got := f.remaining(tt.rule, tt.key); !slices.Equal(got, tt.want) {
			t.Errorf("%s has %v left for %q, want %v", tt.rule, got, tt.key, tt.want)
		}
	}
}

// TestMissingKey: a request without the key of a rule not in shadow mode
// is refused before anything is decided (the door answers 401 or 429), or
// keyed by its address under IPIfMissing.
func TestMissingKey(t *testing.T) {
	for _, tt := range []struct {
		missing  policy.MissingKey
		header   string // "": none
		refused  bool
		key      string // the keyed rule's client key, when decided
		perIPNow int    // what per-ip has left after
	}{
		{policy.RejectMissing, "", true, "", 5},
		{policy.DenyMissing, "", true, "", 5},
		{policy.IPIfMissing, "", false, "192.0.2.1", 4},
		{policy.RejectMissing, "k1", false, "k1", 4},
		{policy.DenyMissing, "k1", false, "k1", 4},
		{policy.IPIfMissing, "k1", false, "k1", 4},
	} {
		name := fmt.Sprintf("%s/header %q", tt.missing, tt.header)
		rules := []policy.Rule{
			{Name: "per-ip", Group: "ip", Limits: perHour(5)},
			{Name: "keyed", Key: apiKey, MissingKey: tt.missing, Limits: perHour(5)},
		}
		f := newFixture(t, rules)
		var hdr []string
		if tt.header != "" {
			hdr = []string{"X-API-Key", tt.header}
		}
		d := f.decide(request("GET", "/", "192.0.2.1", hdr...))
		if tt.refused {
			if d.Allowed || d.Missing == nil || d.Missing.Name != "keyed" || len(d.Applied) != 0 || d.Limited() {
				t.Errorf("%s: allowed %v missing %v applied %q limited %v; want refused for keyed's key, nothing applied", name, d.Allowed, d.Missing, applied(d), d.Limited())
			}
			if r := d.Result(); r != (sluice.Result{}) {
				t.Errorf("%s: Result() = %+v, want the zero Result", name, r)
			}
			if got := f.outcomes(); got != nil {
				t.Errorf("%s: observer told %q of a request refused before any decision", name, got)
			}
		} else {
			if !d.Allowed || d.Missing != nil || len(d.Applied) != 2 || d.Applied[1].Key != tt.key {
				t.Errorf("%s: allowed %v missing %v applied %+v; want allowed with keyed's key %q", name, d.Allowed, d.Missing, d.Applied, tt.key)
			}
		}
		if got := f.remaining("per-ip", "192.0.2.1"); !slices.Equal(got, []int{tt.perIPNow}) {
			t.Errorf("%s: per-ip has %v left, want [%d]", name, got, tt.perIPNow)
		}
	}

	// A rule in shadow mode never refuses: without its key it is left out.
	f := newFixture(t, []policy.Rule{
		{Name: "per-ip", Limits: perHour(5)},
		{Name: "keyed", Group: "k", Key: apiKey, Shadow: true, Limits: perHour(5)},
	})
	d := f.decide(request("GET", "/", "192.0.2.1"))
	if !d.Allowed || d.Missing != nil || !slices.Equal(applied(d), []string{"per-ip"}) {
		t.Errorf("shadow rule without its key: allowed %v missing %v rules %q; want allowed under per-ip alone", d.Allowed, d.Missing, applied(d))
	}
}

// TestShadow: a rule in shadow mode is decided and reported but never
// blocks; it is decided after the others, alone, and only when they admit
// the request, so a denied request spends nothing from it either.
func TestShadow(t *testing.T) {
	rules := []policy.Rule{
		// Listed first, in groups of their own: still decided last.
		{Name: "probe", Group: "probe", Shadow: true, Limits: perHour(1)},
		{Name: "audit", Group: "audit", Shadow: true, Limits: perHour(10)},
		{Name: "api", Limits: perHour(3)},
	}
	f := newFixture(t, rules)
	for i, tt := range []struct {
		allowed  bool
		rules    []string
		outcomes []string
	}{
		{true, []string{"api", "probe", "audit"}, []string{"api=allowed", "probe=allowed", "audit=allowed"}},
		{true, []string{"api", "probe", "audit"}, []string{"api=allowed", "probe=shadow_denied", "audit=allowed"}},
		{true, []string{"api", "probe", "audit"}, []string{"api=allowed", "probe=shadow_denied", "audit=allowed"}},
		// api denies: the shadow rules are not decided, nor reported.
		{false, []string{"api"}, []string{"api=denied"}},
		{false, []string{"api"}, []string{"api=denied"}},
	} {
		d := f.decide(request("GET", "/", "192.0.2.1"))
		if d.Allowed != tt.allowed || !slices.Equal(applied(d), tt.rules) {
			t.Errorf("step %d: allowed %v under %q, want %v under %q", i, d.Allowed, applied(d), tt.allowed, tt.rules)
		}
		if got := f.outcomes(); !reflect.DeepEqual(got, tt.outcomes) {
			t.Errorf("step %d: outcomes %q, want %q", i, got, tt.outcomes)
		}
		// Limits and headers speak for the rules that block only.
		if got := limitNames(d); !slices.Equal(got, []string{"api-1h"}) {
			t.Errorf("step %d: Limits() %q, want [api-1h]", i, got)
		}
		if len(d.Applied) == 3 && (len(d.Applied[1].Results) != 1 || len(d.Applied[2].Results) != 1) {
			t.Errorf("step %d: shadow rules decided without results: %+v", i, d.Applied)
		}
	}
	if got := f.remaining("audit", "192.0.2.1"); !slices.Equal(got, []int{7}) {
		t.Errorf("audit has %v left, want [7]: only the 3 admitted requests spend from it", got)
	}
	if n := strings.Count(f.logs.String(), "shadow rule would deny"); n != 2 {
		t.Errorf("logged %d shadow denials, want 2:\n%s", n, f.logs.String())
	}

	// Alone, a shadow rule over its limit still admits every request.
	f = newFixture(t, []policy.Rule{{Name: "probe", Shadow: true, Limits: perHour(1)}})
	for i := range 3 {
		d := f.decide(request("GET", "/", "192.0.2.1"))
		if !d.Allowed || d.Limited() || len(d.Violated()) != 0 {
			t.Errorf("request %d under a shadow rule alone: allowed %v limited %v violated %q; want allowed, unlimited", i, d.Allowed, d.Limited(), d.Violated())
		}
	}
	if got, want := f.outcomes(), []string{"probe=allowed", "probe=shadow_denied", "probe=shadow_denied"}; !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes %q, want %q", got, want)
	}
}

// TestDecisionLimits: Limits, Result and Violated flatten the limits of
// the rules not in shadow mode, in group order; the binding limit is the
// denying one with the longest wait, or, when admitted, the one with the
// fewest remaining.
func TestDecisionLimits(t *testing.T) {
	fw := func(n int, period time.Duration) sluice.Limit { return sluice.Per(n, period).Using(sluice.FixedWindow) }
	rules := []policy.Rule{
		{Name: "a", Group: "a", Limits: []sluice.Limit{fw(1, time.Minute), fw(50, time.Hour)}},
		{Name: "b", Group: "b", Limits: []sluice.Limit{fw(1, time.Hour)}},
		{Name: "c", Group: "c", Limits: []sluice.Limit{fw(5, 24*time.Hour)}},
	}
	f := newFixture(t, rules)
	f.clock.Set(10 * time.Second) // 50s left in the minute's window, 59m50s in the hour's
	wantNames := []string{"a-1m", "a-1h", "b-1h", "c-24h"}

	d := f.decide(request("GET", "/", "192.0.2.1"))
	ls, rs, binding := d.Limits()
	if !d.Allowed || len(ls) != 4 || len(rs) != 4 || !slices.Equal(limitNames(d), wantNames) {
		t.Fatalf("admitted: allowed %v, limits %q (%d results), want allowed under %q", d.Allowed, limitNames(d), len(rs), wantNames)
	}
	// Admitted: a-1m and b-1h both have 0 left; the first of them binds.
	if binding != 0 || d.Result() != rs[0] || d.Result().Remaining != 0 || d.Violated() != nil {
		t.Errorf("admitted: binding %d, Result %+v, violated %q; want binding 0 (a-1m, 0 left), none violated", binding, d.Result(), d.Violated())
	}
	if a := d.Applied[0]; a.Result() != rs[0] || d.Applied[2].Result() != rs[3] {
		t.Errorf("Applied.Result: %+v and %+v, want %+v and %+v", a.Result(), d.Applied[2].Result(), rs[0], rs[3])
	}

	d = f.decide(request("GET", "/", "192.0.2.1"))
	ls, rs, binding = d.Limits()
	if d.Allowed || len(ls) != 4 {
		t.Fatalf("second request: allowed %v with %d limits, want denied with 4", d.Allowed, len(ls))
	}
	// Denied by a-1m (50s) and b-1h (59m50s): the longer wait binds.
	if got, want := d.Violated(), []string{"a-1m", "b-1h"}; !slices.Equal(got, want) {
		t.Errorf("violated %q, want %q", got, want)
	}
	if binding != 2 || d.Result() != rs[2] {
		t.Errorf("binding %d (%+v), want 2 (b-1h)", binding, d.Result())
	}
	if got, want := d.Result().RetryAfter, 59*time.Minute+50*time.Second; got != want {
		t.Errorf("RetryAfter %v, want %v: the wait until every rule admits", got, want)
	}
	if rs[0].RetryAfter != 50*time.Second || !rs[1].Allowed || !rs[3].Allowed {
		t.Errorf("results %+v: want a-1m waiting 50s, a-1h and c-24h admitting", rs)
	}
	if got := []policy.Outcome{d.Applied[0].Outcome, d.Applied[1].Outcome, d.Applied[2].Outcome}; !slices.Equal(got, []policy.Outcome{policy.Denied, policy.Denied, policy.DeniedByOther}) {
		t.Errorf("outcomes %v, want denied, denied, denied_by_other", got)
	}
	// Each rule's own binding limit: a's is a-1m, the one that denied.
	if a := d.Applied[0]; a.Binding != 0 || a.Result() != rs[0] {
		t.Errorf("a's binding %d (%+v), want 0 (a-1m)", a.Binding, a.Result())
	}
}

// TestPlans: a plan's limits apply to the client keys it lists, through
// Decide and Check alike; other keys get the rule's.
func TestPlans(t *testing.T) {
	rules := []policy.Rule{{
		Name: "search", Key: apiKey, Limits: perHour(1),
		Plans: []policy.Plan{
			{Name: "pro", Keys: []string{"pro-1"}, Prefixes: []string{"sk_pro_"}, Limits: perHour(3)},
			{Name: "team", Prefixes: []string{"sk_"}, Limits: []sluice.Limit{sluice.PerHour(2), sluice.PerDay(20)}},
		},
	}}
	for _, tt := range []struct {
		key      string
		limits   []string
		admitted int
	}{
		{"pro-1", []string{"search-pro-1h"}, 3},
		{"sk_pro_x", []string{"search-pro-1h"}, 3},
		{"sk_x", []string{"search-team-1h", "search-team-24h"}, 2}, // the first matching plan
		{"free", []string{"search-1h"}, 1},
		{"pro-10", []string{"search-1h"}, 1}, // keys compare exactly
	} {
		f := newFixture(t, rules)
		admitted := 0
		for range 5 {
			d := f.decide(request("GET", "/", "192.0.2.1", "X-API-Key", tt.key))
			if !slices.Equal(limitNames(d), tt.limits) {
				t.Errorf("key %q: limits %q, want %q", tt.key, limitNames(d), tt.limits)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != tt.admitted {
			t.Errorf("key %q: %d of 5 admitted, want %d", tt.key, admitted, tt.admitted)
		}
		// Check picks the same plan and shares its count.
		d, err := f.e.Check(context.Background(), policy.Check{Rule: "search", Key: tt.key})
		if err != nil || d.Allowed || !slices.Equal(limitNames(d), tt.limits) {
			t.Errorf("Check(%q) after its limit: %v, %v, limits %q; want denied under %q", tt.key, d, err, limitNames(d), tt.limits)
		}
	}
}

// TestWithKey: a KeyFunc keys its rule's requests (an authenticated user,
// whatever the address), and a request it finds no key for is keyed by
// the rule's own source; the two never share a count.
func TestWithKey(t *testing.T) {
	user := func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-Test-User") // what an auth middleware would put in the context
		return u, u != ""
	}
	f := newFixture(t, []policy.Rule{{Name: "per-user", Limits: perHour(2)}}, policy.WithKey("per-user", user))
	for i, tt := range []struct {
		ip, user string
		key      string
		allowed  bool
	}{
		{"192.0.2.1", "alice", "alice", true},
		{"192.0.2.2", "alice", "alice", true},  // alice from elsewhere: her count
		{"192.0.2.3", "alice", "alice", false}, // spent
		{"192.0.2.1", "", "192.0.2.1", true},   // anonymous: by address
		{"192.0.2.9", "192.0.2.1", "192.0.2.1", true},
		{"192.0.2.9", "192.0.2.1", "192.0.2.1", true},
		{"192.0.2.1", "", "192.0.2.1", true}, // a user named like an address shares nothing with it
		{"192.0.2.1", "", "192.0.2.1", false},
	} {
		var hdr []string
		if tt.user != "" {
			hdr = []string{"X-Test-User", tt.user}
		}
		d := f.decide(request("GET", "/", tt.ip, hdr...))
		if d.Allowed != tt.allowed || len(d.Applied) != 1 || d.Applied[0].Key != tt.key {
			t.Errorf("step %d (%s as %q): allowed %v key %q, want %v key %q", i, tt.ip, tt.user, d.Allowed, d.Applied[0].Key, tt.allowed, tt.key)
		}
	}
}

// TestCheck: Check decides named rules with keys the caller knows, all or
// nothing, and refuses what can never be decided.
// TestRequestKey: a rule keyed by request answers any key its caller
// names through Check, each its own count (an address is text like any
// other, not grouped by prefix), with the plan its key selects; it
// refuses no key but an empty one or bytes that are not UTF-8; and
// Decide never applies it, not even as the default rule of the group it
// would be in, whose default stays the ip rule beside it.
func TestRequestKey(t *testing.T) {
	byCaller := policy.Key{Source: policy.KeyRequest}
	rules := []policy.Rule{
		{Name: "per-ip", Limits: perHour(3)},
		{Name: "svc", Key: byCaller, Limits: perHour(2), Plans: []policy.Plan{{Name: "pro", Prefixes: []string{"pro-"}, Limits: perHour(5)}}},
	}
	ctx := context.Background()
	f := newFixture(t, rules)
	for _, tt := range []struct {
		key       string
		composite bool
		want      []bool // allowed, check by check
	}{
		{"team-a", false, []bool{true, true, false}},
		{"team-b", false, []bool{true, true, false}},
		{"pro-team", false, []bool{true, true, true, true, true, false}},
		{"2001:db8::1", false, []bool{true, true, false}},
		{"2001:db8::2", false, []bool{true, true, false}}, // not the /64 of the one before
		{"équipe", false, []bool{true, true, false}},
		{"3:org=1:a;4:user=1:b", true, []bool{true, true, false}},
	} {
		for i, want := range tt.want {
			d, err := f.e.Check(ctx, policy.Check{Rule: "svc", Key: tt.key, Composite: tt.composite})
			if err != nil {
				t.Fatalf("%q check %d: %v", tt.key, i, err)
			}
			if d.Allowed != want || d.Applied[0].Key != tt.key {
				t.Errorf("%q check %d: allowed %v keyed %q, want %v keyed as given", tt.key, i, d.Allowed, d.Applied[0].Key, want)
			}
		}
	}
	for _, tt := range []struct{ name, key, msg string }{
		{"empty", "", `invalid client key: rule "svc" is keyed by request and needs a key`},
		{"not UTF-8", "team-\xff", `invalid client key: rule "svc": the key is not valid UTF-8`},
	} {
		_, err := f.e.Check(ctx, policy.Check{Rule: "svc", Key: tt.key})
		if !errors.Is(err, policy.ErrInvalidKey) || err.Error() != tt.msg {
			t.Errorf("%s key: %v, want %s", tt.name, err, tt.msg)
		}
	}
	for i := range 4 {
		d := f.decide(request("GET", "/anything", "192.0.2.1"))
		if len(d.Applied) != 1 || d.Applied[0].Rule.Name != "per-ip" || d.Allowed != (i < 3) {
			t.Errorf("request %d: %+v; want per-ip alone to decide it", i, d)
		}
	}
}

func TestCheck(t *testing.T) {
	rules := []policy.Rule{
		{Name: "per-ip", Group: "ip", Limits: perHour(3)},
		{Name: "per-key", Match: "/api/", Key: apiKey, Limits: perHour(1)},
		{Name: "global", Group: "g", Key: policy.Key{Source: policy.KeyGlobal}, Limits: perHour(100)},
		{Name: "probe", Group: "p", Shadow: true, Limits: perHour(1)},
	}
	ctx := context.Background()
	cost := func(n int) *int { return &n }

	t.Run("all or nothing", func(t *testing.T) {
		f := newFixture(t, rules)
		checks := []policy.Check{{Rule: "per-ip", Key: "192.0.2.1"}, {Rule: "per-key", Key: "k"}}
		for i, want := range []bool{true, false, false} {
			d, err := f.e.Check(ctx, checks...)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want {
				t.Errorf("check %d: allowed %v, want %v", i, d.Allowed, want)
			}
			if d.Applied[0].Check != 0 || d.Applied[1].Check != 1 {
				t.Errorf("check %d: Applied answers checks %d, %d; want 0, 1", i, d.Applied[0].Check, d.Applied[1].Check)
			}
		}
		if got := f.remaining("per-ip", "192.0.2.1"); !slices.Equal(got, []int{2}) {
			t.Errorf("per-ip has %v left, want [2]: denied checks spend nothing", got)
		}
	})

	t.Run("shares counts with Decide", func(t *testing.T) {
		f := newFixture(t, rules)
		f.decide(request("GET", "/api/x", "192.0.2.1", "X-API-Key", "k"))
		d, err := f.e.Check(ctx, policy.Check{Rule: "per-key", Key: "k"})
		if err != nil || d.Allowed {
			t.Errorf("Check of a key Decide spent: %v, %v; want denied", d, err)
		}
		// A global rule ignores the key.
		for _, key := range []string{"", "anything"} {
			if got := f.remaining("global", key); !slices.Equal(got, []int{99}) {
				t.Errorf("global for %q has %v left, want [99]", key, got)
			}
		}
	})

	t.Run("costs", func(t *testing.T) {
		f := newFixture(t, rules)
		for _, tt := range []struct {
			cost    *int
			allowed bool
			left    int
		}{
			{cost(0), true, 3}, // reports, spends nothing
			{cost(2), true, 1},
			{cost(2), false, 1},
			{nil, true, 0}, // the rule's cost
		} {
			d, err := f.e.Check(ctx, policy.Check{Rule: "per-ip", Key: "192.0.2.1", Cost: tt.cost})
			if err != nil || d.Allowed != tt.allowed || d.Result().Remaining != tt.left {
				t.Errorf("cost %v: %+v, %v; want allowed %v with %d left", tt.cost, d, err, tt.allowed, tt.left)
			}
		}
	})

	t.Run("shadow", func(t *testing.T) {
		f := newFixture(t, rules)
		for i, want := range []string{"probe=allowed", "probe=shadow_denied"} {
			d, err := f.e.Check(ctx, policy.Check{Rule: "probe", Key: "192.0.2.1"})
			if err != nil || !d.Allowed || d.Limited() {
				t.Errorf("check %d of a shadow rule: %+v, %v; want allowed, unlimited", i, d, err)
			}
			if got := f.outcomes(); !slices.Equal(got, []string{want}) {
				t.Errorf("check %d: outcomes %q, want [%s]", i, got, want)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		f := newFixture(t, rules)
		for _, tt := range []struct {
			name   string
			checks []policy.Check
			is     error  // errors.Is, or nil for an *UnknownRuleError
			msg    string // the error's text
		}{
			{"unknown rule", []policy.Check{{Rule: "nope", Key: "k"}}, nil,
				`unknown rule "nope"; known rules: global, per-ip, per-key, probe`},
			{"the failing check named", []policy.Check{{Rule: "per-ip", Key: "192.0.2.1"}, {Rule: "nope"}}, nil,
				`checks[1]: unknown rule "nope"; known rules: global, per-ip, per-key, probe`},
			{"not an address", []policy.Check{{Rule: "per-ip", Key: "alice"}}, policy.ErrInvalidKey,
				`invalid client key: rule "per-ip" is keyed by ip, and "alice" is not an IP address; write key: request for keys your callers name`},
			{"no address", []policy.Check{{Rule: "per-ip"}}, policy.ErrInvalidKey,
				`invalid client key: rule "per-ip" is keyed by ip and needs a key`},
			{"composite for an address", []policy.Check{{Rule: "per-ip", Key: "1:a=1:b;1:c=1:d", Composite: true}}, policy.ErrInvalidKey,
				`invalid client key: rule "per-ip" is keyed by ip, and a composite key names no single address; write key: request for keys your callers name`},
			{"no key", []policy.Check{{Rule: "per-key"}}, policy.ErrInvalidKey,
				`invalid client key: rule "per-key" is keyed by header:X-Api-Key and needs a key`},
			{"repeated", []policy.Check{{Rule: "per-key", Key: "k"}, {Rule: "per-ip", Key: "192.0.2.1"}, {Rule: "per-key", Key: "k"}}, policy.ErrDuplicateCheck,
				`checks[2]: duplicate check: repeats checks[0] (rule "per-key", key "k"); list each rule once per key`},
			{"repeated address, spelled otherwise", []policy.Check{{Rule: "per-ip", Key: "192.0.2.1"}, {Rule: "per-ip", Key: "::ffff:192.0.2.1"}}, policy.ErrDuplicateCheck,
				`checks[1]: duplicate check: repeats checks[0] (rule "per-ip", key "::ffff:192.0.2.1"); list each rule once per key`},
			{"negative cost", []policy.Check{{Rule: "per-ip", Key: "192.0.2.1", Cost: cost(-1)}}, sluice.ErrInvalidCost,
				`rule "per-ip": invalid cost: cost must not be negative, got -1`},
			{"cost over capacity", []policy.Check{{Rule: "per-ip", Key: "192.0.2.1", Cost: cost(4)}}, sluice.ErrInvalidCost,
				`rule "per-ip": invalid cost: cost 4 exceeds the capacity 3 of per-ip-1h: token_bucket 3/1h0m0s; it could never be admitted`},
		} {
			d, err := f.e.Check(ctx, tt.checks...)
			if err == nil {
				t.Errorf("%s: no error, %+v", tt.name, d)
				continue
			}
			if d != nil {
				t.Errorf("%s: a Decision with the error", tt.name)
			}
			var unknown *policy.UnknownRuleError
			if tt.is == nil && !errors.As(err, &unknown) || tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("%s: error %v (%T) is not %v", tt.name, err, err, tt.is)
			}
			if err.Error() != tt.msg {
				t.Errorf("%s:\n got %s\nwant %s", tt.name, err, tt.msg)
			}
		}
		if got := f.remaining("per-ip", "192.0.2.1"); !slices.Equal(got, []int{3}) {
			t.Errorf("per-ip has %v left, want [3]: refused checks spend nothing", got)
		}
	})
}

// TestUnknownRuleError lists the known rules, sorted, up to a point.
func TestUnknownRuleError(t *testing.T) {
	var many []string
	for i := range 21 {
		many = append(many, fmt.Sprintf("r%02d", i))
	}
	for _, tt := range []struct {
		known []string
		want  string
	}{
		{nil, `unknown rule "x"; no rules are configured`},
		{[]string{"b", "a"}, `unknown rule "x"; known rules: a, b`},
		{many[:20], `unknown rule "x"; known rules: ` + strings.Join(many[:20], ", ")},
		{many, `unknown rule "x" (21 rules are configured)`},
	} {
		var rules []policy.Rule
		for _, name := range tt.known {
			rules = append(rules, policy.Rule{Name: name, Match: "/" + name, Limits: perHour(1)})
		}
		f := newFixture(t, rules)
		if len(tt.known) == 0 {
			f.e.Update(nil)
		}
		_, err := f.e.Check(context.Background(), policy.Check{Rule: "x"})
		var unknown *policy.UnknownRuleError
		if !errors.As(err, &unknown) || err.Error() != tt.want {
			t.Errorf("%d known rules: %v, want %s", len(tt.known), err, tt.want)
			continue
		}
		if want := slices.Sorted(slices.Values(tt.known)); !slices.Equal(unknown.Known, want) {
			t.Errorf("Known = %q, want %q", unknown.Known, want)
		}
	}
}

// TestUpdate: Update swaps the rules between decisions; a rule that stays
// keeps its counts, and nil removes every rule.
func TestUpdate(t *testing.T) {
	f := newFixture(t, []policy.Rule{{Name: "a", Limits: perHour(2)}})
	f.decide(request("GET", "/", "192.0.2.1"))
	set, err := policy.Compile([]policy.Rule{{Name: "a", Limits: perHour(2)}, {Name: "b", Match: "/b", Limits: perHour(1)}})
	if err != nil {
		t.Fatal(err)
	}
	f.e.Update(set)
	if f.e.Rules() != set {
		t.Errorf("Rules() is not the set given to Update")
	}
	if got := f.remaining("a", "192.0.2.1"); !slices.Equal(got, []int{1}) {
		t.Errorf("a has %v left after the update, want [1]", got)
	}
	if d := f.decide(request("GET", "/b", "192.0.2.1")); !slices.Equal(applied(d), []string{"b"}) {
		t.Errorf("GET /b after the update: rules %q, want [b]", applied(d))
	}
	f.e.Update(nil)
	for range 5 {
		if d := f.decide(request("GET", "/", "192.0.2.1")); !d.Allowed || len(d.Applied) != 0 {
			t.Fatalf("without rules: %+v, want allowed and unlimited", d)
		}
	}
	if _, err := f.e.Check(context.Background(), policy.Check{Rule: "a", Key: "192.0.2.1"}); err == nil || !strings.Contains(err.Error(), "no rules are configured") {
		t.Errorf("Check without rules: %v", err)
	}
	// New with a nil set is the same.
	e := policy.New(sluice.New(memory.New()), nil)
	if d, err := e.Decide(request("GET", "/", "192.0.2.1")); err != nil || !d.Allowed || len(d.Applied) != 0 {
		t.Errorf("New(lim, nil).Decide: %+v, %v", d, err)
	}
}

// TestConcurrentDecide: the engine decides from many goroutines while its
// rules are swapped, and a stacked limit is exact: the per-ip limit
// admits exactly its limit across every key and goroutine.
func TestConcurrentDecide(t *testing.T) {
	f := newFixture(t, stackRules())
	set := f.e.Rules()
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				d, err := f.e.Decide(request("GET", "/api/x", "192.0.2.1", "X-API-Key", fmt.Sprintf("k%d-%d", g, i)))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
				if i%5 == 0 {
					f.e.Update(set) // the same rules, swapped in
				}
			}
		}()
	}
	wg.Wait()
	if admitted != 10 {
		t.Errorf("admitted %d, want exactly 10 (per-ip)", admitted)
	}
}
