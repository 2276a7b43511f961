package config

import (
	"errors"
	"io/fs"
	"maps"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

func TestLoadExample(t *testing.T) {
	f, err := Load("testdata/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != "testdata/sluice.yaml" {
		t.Errorf("Path = %q", f.Path)
	}
	wantRedis := Redis{URL: "redis://127.0.0.1:6379/0", OnError: "deny", Timeout: 250 * time.Millisecond}
	if f.Redis != wantRedis {
		t.Errorf("Redis = %+v, want %+v", f.Redis, wantRedis)
	}
	wantHTTP := HTTP{
		Headers:     "ietf",
		ProblemJSON: true,
		PolicyKey:   true,
		IPv6Prefix:  policy.DefaultIPv6Prefix,
		TrustedProxies: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("192.168.1.10/32"),
			netip.MustParsePrefix("fd00::/8"),
		},
	}
	if !reflect.DeepEqual(f.HTTP, wantHTTP) {
		t.Errorf("HTTP = %+v, want %+v", f.HTTP, wantHTTP)
	}

	tb := func(name string, limit int, period time.Duration, burst int) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.TokenBucket, Limit: limit, Period: period, Burst: burst, Name: name}
	}
	lim := func(name string, a sluice.Algorithm, limit int, period time.Duration) sluice.Limit {
		return sluice.Limit{Algorithm: a, Limit: limit, Period: period, Name: name}
	}
	want := []policy.Rule{
		{
			Name: "status", Match: "GET /api/status", Key: policy.Key{Source: policy.KeyIP},
			Limits: []sluice.Limit{tb("status-1s", 100, time.Second, 1000)},
			Cost:   1,
		},
		{
			Name: "search", Match: "GET /api/search", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}, MissingKey: policy.IPIfMissing,
			Limits: []sluice.Limit{tb("search-1s", 5, time.Second, 20)},
			Cost:   1,
			Plans: []policy.Plan{{
				Name:     "pro",
				Keys:     []string{"pro-key-1", "pro-key-2"},
				Prefixes: []string{"sk_pro_"},
				Limits:   []sluice.Limit{tb("search-pro-1s", 50, time.Second, 200)},
			}},
		},
		{
			Name: "orders", Match: "POST /api/orders", Key: policy.Key{Source: policy.KeyQuery, Name: "api_key"}, MissingKey: policy.DenyMissing,
			Limits: []sluice.Limit{{Algorithm: sluice.GCRA, Limit: 2, Period: time.Second, Burst: 10, Name: "orders-1s"}},
			Cost:   2,
		},
		{
			Name: "login", Match: "POST /api/auth/login", Key: policy.Key{Source: policy.KeyIP},
			Limits: []sluice.Limit{
				tb("login-1s", 1, time.Second, 5),
				lim("login-1h", sluice.FixedWindow, 20, time.Hour),
			},
			Cost: 1,
		},
		{
			Name: "export", Match: "/api/exports/{id}", Key: policy.Key{Source: policy.KeyGlobal},
			Limits: []sluice.Limit{
				lim("export-1m", sluice.SlidingWindow, 10, time.Minute),
				lim("export-1m-2", sluice.SlidingLog, 10, time.Minute),
				lim("export-1h30m", sluice.SlidingWindow, 100, 90*time.Minute),
			},
			Cost: 1, Shadow: true,
		},
		{
			Name: "default", Key: policy.Key{Source: policy.KeyIP},
			Limits: []sluice.Limit{tb("default-1s", 20, time.Second, 100)},
			Cost:   1,
		},
	}
	if len(f.Rules) != len(want) {
		t.Fatalf("got %d rules, want %d", len(f.Rules), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(f.Rules[i], want[i]) {
			t.Errorf("rules[%d] =\n  %+v\nwant\n  %+v", i, f.Rules[i], want[i])
		}
	}
	if wantLines := []int{19, 27, 42, 52, 58, 67}; !reflect.DeepEqual(f.Lines, wantLines) {
		t.Errorf("Lines = %v, want %v", f.Lines, wantLines)
	}
	for _, r := range f.Rules {
		for _, ls := range append([][]sluice.Limit{r.Limits}, plansLimits(r)...) {
			for _, l := range ls {
				if err := l.Validate(); err != nil {
					t.Errorf("rule %s: %v", r.Name, err)
				}
			}
		}
	}
}

func plansLimits(r policy.Rule) [][]sluice.Limit {
	var ls [][]sluice.Limit
	for _, p := range r.Plans {
		ls = append(ls, p.Limits)
	}
	return ls
}

func TestDefaults(t *testing.T) {
	f, err := Parse("min.yaml", []byte("rules:\n  - {name: a, limit: 3, period: 1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &File{
		Path:   "min.yaml",
		Redis:  DefaultRedis(),
		Memory: Memory{MaxKeys: memory.DefaultCapacity},
		HTTP:   HTTP{Headers: "both", IPv6Prefix: policy.DefaultIPv6Prefix},
		Rules: []policy.Rule{{
			Name: "a", Key: policy.Key{Source: policy.KeyIP}, Cost: 1,
			Limits: []sluice.Limit{{Algorithm: sluice.TokenBucket, Limit: 3, Period: time.Minute, Name: "a-1m"}},
		}},
		Lines: []int{2},
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("got\n  %+v\nwant\n  %+v", f, want)
	}
}

// TestSettle: a rule's settle section sets its cost to the reserve (1
// when post-paid) and where the cost is read, in canonical form.
func TestSettle(t *testing.T) {
	tests := []struct {
		yaml string
		cost int
		want policy.Settle
	}{
		{"{cost_from: header:x-tokens-used, reserve: 4096, strip: true}", 4096, policy.Settle{CostFrom: policy.CostSource{Header: "X-Tokens-Used"}, Strip: true}},
		{"{cost_from: bytes, postpaid: true}", 1, policy.Settle{}},
		{"{cost_from: header:X-Rows, reserve: 1}", 1, policy.Settle{CostFrom: policy.CostSource{Header: "X-Rows"}}},
	}
	for _, tt := range tests {
		f, err := Parse("s.yaml", []byte("rules:\n  - {name: a, limit: 10000, period: 1m, settle: "+tt.yaml+"}\n"))
		if err != nil {
			t.Fatalf("%s: %v", tt.yaml, err)
		}
		r := f.Rules[0]
		if r.Cost != tt.cost || r.Settle == nil || *r.Settle != tt.want {
			t.Errorf("%s: cost %d, settle %+v; want %d, %+v", tt.yaml, r.Cost, r.Settle, tt.cost, tt.want)
		}
	}
}

// TestLeases: a rule's lease section gives the block of its limit and of
// each of its plans' limits, by name.
func TestLeases(t *testing.T) {
	f, err := Parse("l.yaml", []byte(`
rules:
  - name: search
    limit: 1000
    period: 1s
    lease: {block: 20}
    plans:
      - {name: pro, keys: [k1], limit: 5000, period: 1s}
  - {name: login, match: POST /login, limit: 5, period: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"search-1s": 20, "search-pro-1s": 20}; !maps.Equal(f.Leases, want) {
		t.Errorf("Leases %v, want %v", f.Leases, want)
	}
}

func TestLimitNames(t *testing.T) {
	const file = `
rules:
  - name: api.v2_x
    limits:
      - {limit: 1, period: 1s}
      - {limit: 10, period: 1000ms, algorithm: sliding_window}
      - {limit: 100, period: 60s}
      - {limit: 1000, period: 3600s}
      - {limit: 2000, period: 1h0m30s}
      - {limit: 5, period: 500ms}
      - {limit: 10, period: 1.5s}
      - {limit: 7, period: 1s, algorithm: gcra}
    plans:
      - name: pro
        prefixes: [p_]
        limits:
          - {limit: 10, period: 1s}
          - {limit: 20, period: 1s, algorithm: fixed_window}
`
	f, err := Parse("names.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range f.Rules[0].Limits {
		got = append(got, l.Name)
	}
	for _, l := range f.Rules[0].Plans[0].Limits {
		got = append(got, l.Name)
	}
	want := []string{
		"api.v2_x-1s", "api.v2_x-1s-2", "api.v2_x-1m", "api.v2_x-1h", "api.v2_x-1h30s",
		"api.v2_x-500ms", "api.v2_x-1.5s", "api.v2_x-1s-3",
		"api.v2_x-pro-1s", "api.v2_x-pro-1s-2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("names = %q\nwant    %q", got, want)
	}
}

func TestLimitsFor(t *testing.T) {
	const file = `
rules:
  - name: search
    key: header:X-API-Key
    limit: 5
    period: 1s
    plans:
      - name: pro
        keys: [k1, k2]
        prefixes: [sk_pro_]
        limit: 50
        period: 1s
      - name: team
        prefixes: [sk_]
        limit: 20
        period: 1s
`
	f, err := Parse("plans.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Rules[0]
	for _, tt := range []struct {
		key  string
		want string
	}{
		{"k1", "search-pro-1s"},
		{"k2", "search-pro-1s"},
		{"k3", "search-1s"},
		{"k", "search-1s"},
		{"k1x", "search-1s"},
		{"sk_pro_abc", "search-pro-1s"},
		{"sk_pro_", "search-pro-1s"},
		{"sk_abc", "search-team-1s"},
		{"sk", "search-1s"},
		{"", "search-1s"},
	} {
		ls := r.LimitsFor(tt.key)
		if len(ls) != 1 || ls[0].Name != tt.want {
			t.Errorf("LimitsFor(%q) = %v, want %s", tt.key, ls, tt.want)
		}
	}
}

func TestKeyString(t *testing.T) {
	const file = `
rules:
  - {name: a, match: /a, key: ip, limit: 1, period: 1s}
  - {name: b, match: /b, key: global, limit: 1, period: 1s}
  - {name: c, match: /c, key: "header:x-api-key", limit: 1, period: 1s}
  - {name: d, match: /d, key: "query:api_key", limit: 1, period: 1s}
  - {name: e, match: /e, limit: 1, period: 1s}
  - {name: f, key: request, limit: 1, period: 1s}
`
	f, err := Parse("keys.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ip", "global", "header:X-Api-Key", "query:api_key", "ip", "request"}
	for i, r := range f.Rules {
		if got := r.Key.String(); got != want[i] {
			t.Errorf("rules[%d].Key = %q, want %q", i, got, want[i])
		}
		// What String prints parses back to the same key.
		if k, err := policy.ParseKey(r.Key.String()); err != nil || k != r.Key {
			t.Errorf("policy.ParseKey(%q) = %v, %v", r.Key, k, err)
		}
	}
}

func TestAnchorsAndMerges(t *testing.T) {
	const file = `
x-defaults: &defaults
  key: header:X-API-Key
  missing_key: deny
  algorithm: gcra
  limit: 10
  period: 1s
rules:
  - name: a
    match: /a
    <<: *defaults
  - name: b
    match: /b
    <<: *defaults
    limit: 20          # the rule's own fields win
  - name: c
    match: /c
    limits: &two
      - {limit: 1, period: 1s}
      - {limit: 100, period: 1m}
  - name: d
    match: /d
    limits: *two
`
	f, err := Parse("anchors.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.Rules[0], f.Rules[1]
	if a.Key.Name != "X-Api-Key" || a.MissingKey != policy.DenyMissing || a.Limits[0].Algorithm != sluice.GCRA || a.Limits[0].Limit != 10 {
		t.Errorf("rules[0] = %+v", a)
	}
	if b.Limits[0].Limit != 20 || b.Limits[0].Name != "b-1s" {
		t.Errorf("rules[1] = %+v", b)
	}
	if got := f.Rules[3].Limits; len(got) != 2 || got[1].Name != "d-1m" {
		t.Errorf("rules[3].Limits = %v", got)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tt := range []struct {
		e    Error
		want string
	}{
		{Error{File: "f.yaml", Line: 3, Field: "rules[0].limit", Msg: "bad"}, "rules[0].limit: bad (f.yaml:3)"},
		{Error{File: "f.yaml", Line: 3, Msg: "bad"}, "bad (f.yaml:3)"},
		{Error{File: "f.yaml", Field: "rules", Msg: "bad"}, "rules: bad (f.yaml)"},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	errs := Errors{{File: "f", Line: 1, Msg: "one"}, {File: "f", Line: 2, Msg: "two"}}
	if got, want := errs.Error(), "one (f:1)\ntwo (f:2)"; got != want {
		t.Errorf("Errors.Error() = %q, want %q", got, want)
	}
	var e *Error
	if !errors.As(error(errs), &e) || e.Msg != "one" {
		t.Errorf("errors.As(Errors, *Error) = %v", e)
	}
}

// checkErrs fails unless err is an Errors whose lines are want.
func checkErrs(t *testing.T, err error, want ...string) {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v (%T) is not an Errors", err, err)
	}
	got := strings.Split(err.Error(), "\n")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestGroups: rules in different groups stack. Each group may have its own
// default rule, and patterns are checked for conflicts only within a
// group: the same pattern, or patterns ServeMux would find in conflict,
// in two groups are fine.
func TestGroups(t *testing.T) {
	const file = `
rules:
  - name: per-ip               # everything, per address
    group: ip
    limit: 100
    period: 1m
  - name: per-key              # the API, per key
    group: key
    match: /api/
    key: header:X-API-Key
    limit: 50
    period: 1m
  - name: login                # the default group: login, strictest
    match: POST /api/login
    limit: 5
    period: 1m
  - name: key-login            # in group key too, same pattern
    group: key
    match: POST /api/login
    key: header:X-API-Key
    limit: 10
    period: 1m
  - name: everything           # a second default rule, in its own group
    limit: 1000
    period: 1m
  - {name: ab, group: x, match: '/a/{x}', limit: 1, period: 1s}
  - {name: yb, group: y, match: '/{y}/b', limit: 1, period: 1s}
`
	f, err := Parse("groups.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range f.Rules {
		got = append(got, r.Name+"@"+r.Group)
	}
	want := []string{"per-ip@ip", "per-key@key", "login@", "key-login@key", "everything@", "ab@x", "yb@y"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rules@groups = %q\nwant %q", got, want)
	}
	set, err := f.Compile()
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	e := policy.New(sluice.New(memory.New()), set)
	for _, tt := range []struct {
		method, target string
		want           []string // the rules that apply, by group order
	}{
		{"POST", "/api/login", []string{"per-ip", "key-login", "login"}},
		{"GET", "/api/search", []string{"per-ip", "per-key", "everything"}},
		{"GET", "/", []string{"per-ip", "everything"}},
		{"GET", "/a/b", []string{"per-ip", "everything", "ab", "yb"}},
	} {
		r := httptest.NewRequest(tt.method, tt.target, nil)
		r.Header.Set("X-API-Key", "k")
		d, err := e.Decide(r)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range d.Applied {
			names = append(names, a.Rule.Name)
		}
		if !reflect.DeepEqual(names, tt.want) {
			t.Errorf("%s %s: applied %q, want %q", tt.method, tt.target, names, tt.want)
		}
	}
}

func TestMemory(t *testing.T) {
	for _, tt := range []struct {
		memory string
		want   int
	}{
		{"", memory.DefaultCapacity},
		{"memory:\n", memory.DefaultCapacity},
		{"memory: {}\n", memory.DefaultCapacity},
		{"memory: {max_keys: 1}\n", 1},
		{"memory:\n  max_keys: 2000000\n", 2_000_000},
	} {
		f, err := Parse("mem.yaml", []byte(tt.memory+"rules:\n  - {name: a, limit: 1, period: 1h}\n"))
		if err != nil {
			t.Fatalf("%q: %v", tt.memory, err)
		}
		if f.Memory.MaxKeys != tt.want {
			t.Errorf("%q: MaxKeys = %d, want %d", tt.memory, f.Memory.MaxKeys, tt.want)
		}
	}
}

func TestIPv6Prefix(t *testing.T) {
	for _, tt := range []struct {
		http string
		want int
	}{
		{"", policy.DefaultIPv6Prefix},
		{"http: {headers: both}\n", policy.DefaultIPv6Prefix},
		{"http: {ipv6_prefix: 1}\n", 1},
		{"http: {ipv6_prefix: 56}\n", 56},
		{"http: {ipv6_prefix: 128}\n", 128},
	} {
		f, err := Parse("v6.yaml", []byte(tt.http+"rules:\n  - {name: a, limit: 1, period: 1h}\n"))
		if err != nil {
			t.Fatalf("%q: %v", tt.http, err)
		}
		if f.HTTP.IPv6Prefix != tt.want {
			t.Errorf("%q: IPv6Prefix = %d, want %d", tt.http, f.HTTP.IPv6Prefix, tt.want)
		}
	}

	// File.Compile hands the prefix to the engine: under /56, two
	// addresses of one /56 share a count, and one of the next /56 does not.
	f, err := Parse("v6.yaml", []byte("http: {ipv6_prefix: 56}\nrules:\n  - {name: a, limit: 1, period: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	decideSteps(t, "file", set, []step{
		{"[2001:db8:0:100::1]:1234", true},
		{"[2001:db8:0:1ff:ffff::2]:1234", false}, // the same /56
		{"[2001:db8:0:200::1]:1234", true},       // the next one
	})

	// A File built in code, without an http section, compiles with the
	// default /64.
	built := &File{Rules: []policy.Rule{{Name: "a", Limits: []sluice.Limit{sluice.PerHour(1)}}}}
	set, err = built.Compile()
	if err != nil {
		t.Fatalf("Compile of a File built in code: %v", err)
	}
	decideSteps(t, "built File", set, []step{
		{"[2001:db8:0:1::1]:1234", true},
		{"[2001:db8:0:1:ffff::2]:1234", false}, // the same /64
		{"[2001:db8:0:2::1]:1234", true},
	})
}

// step is one request from remote, and whether it should be admitted.
type step struct {
	remote string
	want   bool
}

// decideSteps decides a request from each step's address in turn under
// set, on a fresh memory store.
func decideSteps(t *testing.T, name string, set *policy.RuleSet, steps []step) {
	t.Helper()
	e := policy.New(sluice.New(memory.New()), set)
	for i, tt := range steps {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		d, err := e.Decide(r)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != tt.want {
			t.Errorf("%s, step %d: %s allowed = %v, want %v", name, i, tt.remote, d.Allowed, tt.want)
		}
	}
}

// TestErrorPolicies: redis.replicas is auto (0) or a number, and a rule's
// on_error becomes its policy, whose local fallback is the store's.
func TestErrorPolicies(t *testing.T) {
	for _, tt := range []struct {
		redis string
		want  int
	}{
		{"", 0},
		{"redis: {replicas: auto}\n", 0},
		{"redis: {replicas: 3}\n", 3},
	} {
		f, err := Parse("r.yaml", []byte(tt.redis+"rules:\n  - {name: a, limit: 1, period: 1h}\n"))
		if err != nil {
			t.Fatalf("%q: %v", tt.redis, err)
		}
		if f.Redis.Replicas != tt.want {
			t.Errorf("%q: Replicas = %d, want %d", tt.redis, f.Redis.Replicas, tt.want)
		}
	}
	f, err := Parse("r.yaml", []byte(`rules:
  - {name: a, limit: 1, period: 1h}
  - {name: login, match: POST /login, limit: 1, period: 1h, on_error: deny}
  - {name: status, match: GET /status, limit: 1, period: 1h, on_error: allow}
  - {name: search, match: GET /search, limit: 1, period: 1h, on_error: local}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []sluice.ErrorPolicy{{}, sluice.DenyOnError, sluice.AllowOnError, sluice.LocalOnError(nil)}
	for i, r := range f.Rules {
		if r.OnError != want[i] {
			t.Errorf("rule %s: OnError %q, want %q", r.Name, r.OnError, want[i])
		}
	}
}

// TestBatchField: redis.batch is 0 (the store's default) unless the file
// gives a count of at least 1.
func TestBatchField(t *testing.T) {
	const rule = "rules: [{name: a, limit: 1, period: 1s}]\n"
	for _, tc := range []struct {
		redis string
		want  int
		err   string
	}{
		{"", 0, ""},
		{"redis: {url: redis://127.0.0.1:6379}\n", 0, ""},
		{"redis: {url: redis://127.0.0.1:6379, batch: 1}\n", 1, ""},
		{"redis: {batch: 64}\n", 64, ""},
		{"redis: {batch: 0}\n", 0, "redis.batch: must be at least 1 (1: no coalescing), got 0"},
		{"redis: {batch: lots}\n", 0, "redis.batch"},
	} {
		f, err := Parse("f.yaml", []byte(tc.redis+rule))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one with %q", tc.redis, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Redis.Batch != tc.want {
			t.Errorf("%q: batch %d, want %d", tc.redis, f.Redis.Batch, tc.want)
		}
	}
}

// TestDenyCacheField: redis.deny_cache is false unless the file says true.
func TestDenyCacheField(t *testing.T) {
	for text, want := range map[string]bool{
		"rules: [{name: a, limit: 1, period: 1s}]\n":                                                         false,
		"redis: {url: redis://127.0.0.1:6379}\nrules: [{name: a, limit: 1, period: 1s}]\n":                   false,
		"redis: {url: redis://127.0.0.1:6379, deny_cache: true}\nrules: [{name: a, limit: 1, period: 1s}]\n": true,
	} {
		f, err := Parse("f.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if f.Redis.DenyCache != want {
			t.Errorf("%q: deny_cache %v, want %v", text, f.Redis.DenyCache, want)
		}
	}
	if _, err := Parse("f.yaml", []byte("redis: {deny_cache: sometimes}\nrules: [{name: a, limit: 1, period: 1s}]\n")); err == nil || !strings.Contains(err.Error(), "redis.deny_cache") {
		t.Errorf("deny_cache: sometimes: %v", err)
	}
}

// TestWaitFields: redis.wait_replicas is 0 unless the file says more, and
// wait_timeout is then half the store timeout unless the file says.
func TestWaitFields(t *testing.T) {
	for _, tc := range []struct {
		redis    string
		replicas int
		timeout  time.Duration
	}{
		{"", 0, 0},
		{"redis: {wait_replicas: 0}\n", 0, 0},
		{"redis: {url: redis://127.0.0.1:6379, wait_replicas: 1}\n", 1, 50 * time.Millisecond},
		{"redis: {wait_replicas: 2, timeout: 301ms}\n", 2, 150 * time.Millisecond},
		{"redis: {wait_replicas: 1, timeout: 2ms}\n", 1, time.Millisecond},
		{"redis: {wait_replicas: 1, wait_timeout: 99ms}\n", 1, 99 * time.Millisecond},
		{"redis: {wait_replicas: 1, timeout: 2s, wait_timeout: 1s}\n", 1, time.Second},
	} {
		f, err := Parse("f.yaml", []byte(tc.redis+"rules: [{name: a, limit: 1, period: 1s}]\n"))
		if err != nil {
			t.Errorf("%q: %v", tc.redis, err)
			continue
		}
		if f.Redis.WaitReplicas != tc.replicas || f.Redis.WaitTimeout != tc.timeout {
			t.Errorf("%q: wait_replicas %d, wait_timeout %v; want %d, %v", tc.redis, f.Redis.WaitReplicas, f.Redis.WaitTimeout, tc.replicas, tc.timeout)
		}
	}
}

// TestRequestRules: rules keyed by request are checked by name and in no
// group, so that a file may hold several of them, without match, beside
// the default rule keyed by ip that HTTP requests get.
func TestRequestRules(t *testing.T) {
	const file = `
rules:
  - {name: per-ip, limit: 100, period: 1m}
  - {name: teams, key: request, limit: 10, period: 1s}
  - {name: users, key: request, limit: 1000, period: 1h}
`
	f, err := Parse("svc.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]policy.Source{"per-ip": policy.KeyIP, "teams": policy.KeyRequest, "users": policy.KeyRequest} {
		if r := set.Rule(name); r == nil || r.Key.Source != want || r.Match != "" {
			t.Errorf("rule %s: %+v, want keyed by %v, no match", name, r, want)
		}
	}
}
