//go:build integration

package policy_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/storetest"
)

// openRedis starts a redis-server for t and returns a store on it.
func openRedis(t *testing.T) (*redis.Store, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	store, err := redis.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return store, srv
}

// TestRedis: stacked rules on a real Redis, where the parts of one
// decision live under different client keys: all or nothing still holds,
// and Check and Decide share counts. Periods are an hour or more, so that
// no key the frozen clock wrote expires in Redis's own time during the
// test.
func TestRedis(t *testing.T) {
	store, _ := openRedis(t)
	clock := storetest.NewClock()
	lim := sluice.New(store, sluice.WithClock(clock.Now))
	f := newFixtureOn(t, lim, clock, stackRules())

	admitted := madeUpKeys(t, f, "2001:db8:1:2::1")
	if admitted != 10 {
		t.Errorf("12 made-up keys from one /64: %d admitted, want 10", admitted)
	}
	// Another address of the /64, through Check: the same count.
	if got := f.remaining("per-ip", "2001:db8:1:2:ffff::9"); !slices.Equal(got, []int{0}) {
		t.Errorf("per-ip has %v left for another address of the /64, want [0]", got)
	}
	if got := f.remaining("per-ip", "2001:db8:1:3::1"); !slices.Equal(got, []int{10}) {
		t.Errorf("per-ip has %v left for the next /64, want [10]", got)
	}

	// A stacked login: denied by login, and per-ip and per-key keep what
	// they had.
	for i, want := range []bool{true, true, false} {
		d := f.decide(request("POST", "/api/login", "192.0.2.1", "X-API-Key", "k"))
		if d.Allowed != want {
			t.Errorf("login %d: allowed %v, want %v (violated %q)", i, d.Allowed, want, d.Violated())
		}
	}
	if a, b := f.remaining("per-ip", "192.0.2.1"), f.remaining("per-key", "k"); !slices.Equal(a, []int{8}) || !slices.Equal(b, []int{3}) {
		t.Errorf("after a denied login: per-ip %v, per-key %v left; want [8] and [3]", a, b)
	}
}

// TestStoreDown: with Redis gone, the Limiter's error policy decides for
// every rule of the request at once, the observer hears degraded outcomes,
// and a rule in shadow mode never fails a request.
func TestStoreDown(t *testing.T) {
	store, srv := openRedis(t)
	srv.Stop()
	rules := append(stackRules(), policy.Rule{Name: "probe", Group: "probe", Shadow: true, Limits: perHour(100)})
	for _, tt := range []struct {
		policy   sluice.ErrorPolicy
		allowed  bool
		degraded sluice.Degradation
		err      bool
		outcomes []string
	}{
		{sluice.AllowOnError, true, sluice.DegradedAllow, false,
			[]string{"per-ip=degraded_allowed", "per-key=degraded_allowed", "probe=degraded_allowed"}},
		{sluice.DenyOnError, false, sluice.DegradedDeny, false,
			[]string{"per-ip=degraded_denied", "per-key=degraded_denied"}},
		{sluice.LocalOnError(memory.New()), true, sluice.DegradedLocal, false,
			[]string{"per-ip=degraded_allowed", "per-key=degraded_allowed", "probe=degraded_allowed"}},
		{sluice.ReturnErrors, false, sluice.NotDegraded, true, nil},
	} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			clock := storetest.NewClock()
			lim := sluice.New(store, sluice.WithClock(clock.Now), sluice.WithErrorPolicy(tt.policy), sluice.WithStoreTimeout(2*time.Second))
			f := newFixtureOn(t, lim, clock, rules)
			d, err := f.e.Decide(request("GET", "/api/search", "192.0.2.1", "X-API-Key", "k"))
			if tt.err {
				if err == nil {
					t.Fatalf("no error: %+v", d)
				}
				if !strings.Contains(f.logs.String(), "rate limit not decided") {
					t.Errorf("the failure was not logged:\n%s", f.logs.String())
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != tt.allowed || d.Degraded != tt.degraded {
					t.Errorf("allowed %v degraded %v, want %v %v", d.Allowed, d.Degraded, tt.allowed, tt.degraded)
				}
			}
			if got := f.outcomes(); !reflect.DeepEqual(got, tt.outcomes) {
				t.Errorf("outcomes %q, want %q", got, tt.outcomes)
			}
		})
	}

	// Alone, a shadow rule whose store fails lets the request through,
	// without an error even under ReturnErrors.
	clock := storetest.NewClock()
	lim := sluice.New(store, sluice.WithClock(clock.Now), sluice.WithStoreTimeout(2*time.Second))
	f := newFixtureOn(t, lim, clock, []policy.Rule{{Name: "probe", Shadow: true, Limits: perHour(1)}})
	d, err := f.e.Decide(request("GET", "/", "192.0.2.1"))
	if err != nil || !d.Allowed {
		t.Errorf("shadow rule, store down: %+v, %v; want allowed without error", d, err)
	}
	if got := f.outcomes(); got != nil {
		t.Errorf("observer told %q of a rule that was not decided", got)
	}
	// The caller going away is no outage: not logged.
	f = newFixtureOn(t, lim, clock, stackRules())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.e.Decide(request("GET", "/", "192.0.2.1").WithContext(ctx))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("canceled request: %v, want context.Canceled", err)
	}
	if strings.Contains(f.logs.String(), "not decided") {
		t.Errorf("a canceled request was logged as a failure:\n%s", f.logs.String())
	}
}

// TestRuleErrorPolicy: with Redis down, each rule answers by its own
// on_error, or the store's: the login rule fails closed, the status rule
// open, the search rule decides locally, and a stacked request is denied
// by its strictest part without spending locally.
func TestRuleErrorPolicy(t *testing.T) {
	store, srv := openRedis(t)
	fallback := memory.New()
	policyAllow, err := sluice.ParseErrorPolicy("allow", fallback)
	if err != nil {
		t.Fatal(err)
	}
	lim := sluice.New(store, sluice.WithErrorPolicy(policyAllow))
	deny, _ := sluice.ParseErrorPolicy("deny", nil)
	local, _ := sluice.ParseErrorPolicy("local", nil)
	hour := func(n int) []sluice.Limit { return []sluice.Limit{sluice.PerHour(n)} }
	f := newFixtureOn(t, lim, nil, []policy.Rule{
		{Name: "per-ip", Group: "ip", Limits: hour(100)},
		{Name: "login", Match: "POST /login", Limits: hour(5), OnError: deny},
		{Name: "search", Match: "GET /search", Limits: hour(2), OnError: local},
		{Name: "status", Match: "GET /status", Limits: hour(5)},
	})
	srv.Stop()
	for _, tt := range []struct {
		method, path string
		allowed      []bool
		degraded     sluice.Degradation
	}{
		{"POST", "/login", []bool{false, false}, sluice.DegradedDeny},
		{"GET", "/status", []bool{true, true, true}, sluice.DegradedAllow},
		{"GET", "/search", []bool{true, true, false}, sluice.DegradedLocal},
	} {
		for i, want := range tt.allowed {
			d := f.decide(request(tt.method, tt.path, "192.0.2.1"))
			if d.Allowed != want {
				t.Errorf("%s %s #%d with Redis down: allowed %v, want %v", tt.method, tt.path, i, d.Allowed, want)
			}
			if i == 0 && d.Degraded == sluice.NotDegraded {
				t.Errorf("%s %s with Redis down: not degraded", tt.method, tt.path)
			}
			for _, a := range d.Applied {
				if a.Rule.Name != "per-ip" && a.Results[0].Degraded != tt.degraded {
					t.Errorf("%s %s: rule %s degraded %v, want %v", tt.method, tt.path, a.Rule.Name, a.Results[0].Degraded, tt.degraded)
				}
			}
		}
	}
	// Nothing the denied logins asked was spent anywhere: the local
	// fallback holds only the searches.
	look, err := fallback.Take(context.Background(), sluice.Request{Parts: []sluice.Part{{Key: "ip:192.0.2.1", Limits: []sluice.Limit{sluice.PerHour(2).Named("search-1h")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if look[0].Remaining != 0 {
		t.Errorf("the local search count has %d left, want 0 (two spent)", look[0].Remaining)
	}
}
