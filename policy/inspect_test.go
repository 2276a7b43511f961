//go:build integration

package policy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// inspectRules has one rule per algorithm keyed by header, each of two
// limits (a minute and an hour, so that nothing a frozen clock wrote
// expires in Redis's own time during a test), a costly rule, and a rule
// keyed by ip with a plan.
func inspectRules() []policy.Rule {
	var rules []policy.Rule
	for _, a := range sluice.Algorithms {
		minute := sluice.PerMinute(5).Using(a)
		if a == sluice.TokenBucket || a == sluice.GCRA {
			minute = minute.WithBurst(3)
		}
		rules = append(rules, policy.Rule{
			Name:   "r-" + string(a),
			Group:  string(a),
			Key:    policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"},
			Limits: []sluice.Limit{minute, sluice.PerHour(8).Using(a)},
		})
	}
	return append(rules,
		policy.Rule{Name: "costly", Group: "costly", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}, Cost: 2, Limits: []sluice.Limit{sluice.PerHour(5)}},
		policy.Rule{Name: "by-ip", Group: "by-ip", Limits: []sluice.Limit{sluice.PerHour(4).Using(sluice.FixedWindow)}, Plans: []policy.Plan{{Name: "pro", Prefixes: []string{"2001:db8:1:"}, Limits: []sluice.Limit{sluice.PerHour(40).Using(sluice.FixedWindow)}}}},
	)
}

// inspectAgrees: for every algorithm's rule, at random instants and
// costs (above what remains, often, and 0), Inspect answers exactly what
// the next Check of the same cost gets, limit by limit; inspecting twice
// answers the same; and neither inspection is told to the observer.
func inspectAgrees(t *testing.T, f *fixture) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	var at time.Duration
	for _, a := range sluice.Algorithms {
		rule := "r-" + string(a)
		for step := range 40 {
			at += time.Duration(rng.Int64N(int64(4 * time.Second)))
			f.clock.Set(at)
			key := fmt.Sprintf("client-%d", rng.IntN(3))
			cost := rng.IntN(4) // 0 to the minute limit's smallest capacity
			c := policy.Check{Rule: rule, Key: key, Cost: &cost}
			in, err := f.e.Inspect(ctx, c)
			if err != nil {
				t.Fatalf("%s step %d: Inspect: %v", rule, step, err)
			}
			again, err := f.e.Inspect(ctx, c)
			if err != nil || !slices.Equal(again.Limits, in.Limits) {
				t.Fatalf("%s step %d: Inspect again = %+v, %v; the first %+v", rule, step, again, err, in)
			}
			if seen := f.outcomes(); len(seen) != 0 {
				t.Fatalf("%s step %d: Inspect told the observer %q", rule, step, seen)
			}
			d, err := f.e.Check(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			got := d.Applied[0]
			if in.Allowed != d.Allowed || in.Binding != got.Binding || in.Key != got.Key || in.Cost != cost || len(in.Limits) != len(got.Results) {
				t.Fatalf("%s step %d: Inspect = %+v; Check = allowed %v, binding %d, key %q, %+v", rule, step, in, d.Allowed, got.Binding, got.Key, got.Results)
			}
			for i, ls := range in.Limits {
				if ls.Result != got.Results[i] || ls.Limit != got.Limits[i].Normalized() {
					t.Errorf("%s step %d at %v, %s cost %d: Inspect says %+v under %s, the Check got %+v", rule, step, at, key, cost, ls.Result, ls.Limit, got.Results[i])
				}
			}
			if in.Result() != d.Result() {
				t.Errorf("%s step %d: Inspection.Result %+v, Decision.Result %+v", rule, step, in.Result(), d.Result())
			}
			seen := f.outcomes()
			if cost == 0 && len(seen) != 0 {
				t.Errorf("%s step %d: a check of cost 0 told the observer %q; a look decides nothing", rule, step, seen)
			}
			if cost > 0 && len(seen) != 1 {
				t.Errorf("%s step %d: a check of cost %d told the observer %q, want one outcome", rule, step, cost, seen)
			}
		}
	}
}

func TestInspectMemory(t *testing.T) {
	inspectAgrees(t, newFixture(t, inspectRules()))
}

func TestInspectRedis(t *testing.T) {
	store, _ := openRedis(t)
	clock := storetest.NewClock()
	inspectAgrees(t, newFixtureOn(t, sluice.New(store, sluice.WithClock(clock.Now)), clock, inspectRules()))
}

// TestInspectResolves: Inspect names the client as Check does: the
// rule's cost by default, an IPv6 address by its prefix, the plan whose
// prefix matches; and refuses what Check refuses.
func TestInspectResolves(t *testing.T) {
	f := newFixture(t, inspectRules())
	ctx := context.Background()
	if _, err := f.e.Check(ctx, policy.Check{Rule: "by-ip", Key: "2001:db8:1:2::1"}); err != nil {
		t.Fatal(err)
	}
	in, err := f.e.Inspect(ctx, policy.Check{Rule: "by-ip", Key: "2001:db8:1:2:ffff::9"})
	if err != nil {
		t.Fatal(err)
	}
	if in.Key != "2001:db8:1:2::/64" || in.Cost != 1 || len(in.Limits) != 1 || in.Limits[0].Limit.Name != "by-ip-pro-1h" || in.Result().Remaining != 38 {
		t.Errorf("another address of the /64 under its plan: %+v; want key 2001:db8:1:2::/64, by-ip-pro-1h, 38 left after it", in)
	}
	in, err = f.e.Inspect(ctx, policy.Check{Rule: "by-ip", Key: "192.0.2.7"})
	if err != nil || in.Limits[0].Limit.Name != "by-ip-1h" || in.Result().Remaining != 3 || !in.Allowed {
		t.Errorf("an address no plan matches: %+v, %v; want by-ip-1h, 3 left after it", in, err)
	}
	in, err = f.e.Inspect(ctx, policy.Check{Rule: "costly", Key: "k"})
	if err != nil || in.Cost != 2 || in.Result().Remaining != 3 {
		t.Errorf("a rule of cost 2: %+v, %v; want cost 2, 3 left after it", in, err)
	}
	want := policy.LimitState{Limit: sluice.Limit{Name: "r-gcra-1m", Algorithm: sluice.GCRA, Limit: 5, Period: time.Minute, Burst: 3}}
	if in, err := f.e.Inspect(ctx, policy.Check{Rule: "r-gcra", Key: "k"}); err != nil || in.Limits[0].Limit != want.Limit {
		t.Errorf("the limit of r-gcra: %+v, %v; want %+v", in, err, want.Limit)
	}

	six := 6
	var unknown *policy.UnknownRuleError
	for _, tt := range []struct {
		name string
		c    policy.Check
		is   func(error) bool
	}{
		{"unknown rule", policy.Check{Rule: "nope", Key: "k"}, func(err error) bool { return errors.As(err, &unknown) }},
		{"not an address", policy.Check{Rule: "by-ip", Key: "k"}, func(err error) bool { return errors.Is(err, policy.ErrInvalidKey) }},
		{"no key", policy.Check{Rule: "costly"}, func(err error) bool { return errors.Is(err, policy.ErrInvalidKey) }},
		{"cost over capacity", policy.Check{Rule: "costly", Key: "k", Cost: &six}, func(err error) bool { return errors.Is(err, sluice.ErrInvalidCost) }},
	} {
		if _, err := f.e.Inspect(ctx, tt.c); err == nil || !tt.is(err) {
			t.Errorf("%s: Inspect error %v", tt.name, err)
		}
	}
	noPeek := policy.New(sluice.New(storetest.TakeOnly(memory.New())), f.e.Rules())
	if _, err := noPeek.Inspect(ctx, policy.Check{Rule: "costly", Key: "k"}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("over a store without Peek: %v, want errors.ErrUnsupported", err)
	}
}

// TestObserverKey: the observer is told each rule's client key as the
// rule yields it (Applied.Key: an IPv6 address as its /64), and nothing
// of a check of cost 0.
func TestObserverKey(t *testing.T) {
	f := newFixture(t, inspectRules())
	ctx := context.Background()
	zero := 0
	for _, c := range []policy.Check{
		{Rule: "by-ip", Key: "2001:db8:1:2::1"},
		{Rule: "costly", Key: "k", Cost: &zero},
		{Rule: "costly", Key: "k"},
	} {
		if _, err := f.e.Check(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	seen, keys := f.observed()
	if want := []string{"by-ip=allowed", "costly=allowed"}; !slices.Equal(seen, want) {
		t.Errorf("observed %q, want %q (no cost 0)", seen, want)
	}
	if want := []string{"2001:db8:1:2::/64", "k"}; !slices.Equal(keys, want) {
		t.Errorf("observed keys %q, want %q", keys, want)
	}
}

// TestReset: Reset forgets a client's state under a rule, resolved as
// Check resolves it (another address of the /64, its plan), in the store
// and in the deny cache, and nothing of another client's or rule's.
func TestReset(t *testing.T) {
	clock := storetest.NewClock()
	lim := sluice.New(memory.New(memory.WithClock(clock.Now)), sluice.WithClock(clock.Now), sluice.WithDenyCache(0))
	f := newFixtureOn(t, lim, clock, inspectRules())
	ctx := context.Background()
	spend := func(rule, key string, n int) (denied bool) {
		t.Helper()
		for range n {
			d, err := f.e.Check(ctx, policy.Check{Rule: rule, Key: key})
			if err != nil {
				t.Fatal(err)
			}
			denied = !d.Allowed
		}
		return denied
	}
	if !spend("by-ip", "192.0.2.1", 5) || !spend("by-ip", "192.0.2.2", 5) || !spend("r-fixed_window", "a", 6) || !spend("by-ip", "2001:db8:1:2::1", 41) {
		t.Fatal("the spending was not denied at last")
	}
	for _, tt := range []struct{ rule, key string }{{"by-ip", "192.0.2.1"}, {"by-ip", "2001:db8:1:2::77"}} {
		if _, err := f.e.Reset(ctx, policy.Check{Rule: tt.rule, Key: tt.key}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		rule, key string
		left      int
	}{
		{"by-ip", "192.0.2.1", 3},
		{"by-ip", "2001:db8:1:2::1", 39},
		{"by-ip", "192.0.2.2", 0},
		{"r-fixed_window", "a", 0},
	} {
		d, err := f.e.Check(ctx, policy.Check{Rule: tt.rule, Key: tt.key})
		if err != nil {
			t.Fatal(err)
		}
		if want := tt.left > 0; d.Allowed != want || d.Result().Remaining != tt.left {
			t.Errorf("%s %s after the resets: allowed %v, %d left; want %v, %d", tt.rule, tt.key, d.Allowed, d.Result().Remaining, want, tt.left)
		}
	}
	if _, err := f.e.Reset(ctx, policy.Check{Rule: "nope", Key: "k"}); err == nil {
		t.Error("Reset of an unknown rule: no error")
	}
	if _, err := f.e.Reset(ctx, policy.Check{Rule: "by-ip", Key: "not-an-address"}); !errors.Is(err, policy.ErrInvalidKey) {
		t.Errorf("Reset of a key that is no address under an ip rule: %v, want ErrInvalidKey", err)
	}
}

// TestDenialLog: at rate 1 every denial is logged, a shadow rule's too,
// with its rule, limits, retry_after and the client key masked; at rate 0
// none; a rate between logs about that share; WithPlainKeys shows the
// key; looks (cost 0) are never logged.
func TestDenialLog(t *testing.T) {
	const secret = "secret-api-key-42"
	rules := []policy.Rule{
		{Name: "api", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}, Limits: []sluice.Limit{sluice.PerHour(1)}},
		{Name: "audit", Group: "audit", Shadow: true, Limits: []sluice.Limit{sluice.PerHour(1)}},
	}
	set, err := policy.Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	run := func(n int, opts ...policy.EngineOption) string {
		t.Helper()
		var logs bytes.Buffer
		clock := storetest.NewClock()
		lim := sluice.New(memory.New(memory.WithClock(clock.Now)), sluice.WithClock(clock.Now))
		e := policy.New(lim, set, append([]policy.EngineOption{policy.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}, opts...)...)
		ctx := context.Background()
		zero := 0
		for i := range n {
			key := secret
			if i%2 == 1 {
				key = fmt.Sprintf("%s-%d", secret, i) // admitted by api, denied by audit
			}
			// The first request of secret is admitted, its later ones
			// denied by api; the others admitted by api, and then denied
			// by the shadow rule, keyed by the one address.
			r := request("GET", "/", "192.0.2.1", "X-Api-Key", key)
			if _, err := e.Decide(r); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Check(ctx, policy.Check{Rule: "api", Key: secret, Cost: &zero}); err != nil {
				t.Fatal(err)
			}
		}
		return logs.String()
	}
	const n = 2000
	denials, shadows := n/2-1, n/2 // secret's after its first; the others' under audit
	logs := run(n, policy.WithDenialLog(1))
	if got := strings.Count(logs, "sluice: rate limited"); got != denials {
		t.Errorf("rate 1: %d denials logged, want %d", got, denials)
	}
	if got := strings.Count(logs, "sluice: shadow rule would deny"); got != shadows {
		t.Errorf("rate 1: %d shadow denials logged, want %d", got, shadows)
	}
	if strings.Contains(logs, secret) {
		t.Errorf("the client key is in the log in the clear:\n%.500s", logs)
	}
	for _, want := range []string{"rule=api limits=api-1h retry_after=", "key=" + policy.MaskKey(secret), "rule=audit limits=audit-1h"} {
		if !strings.Contains(logs, want) {
			t.Errorf("rate 1: the log lacks %q:\n%.500s", want, logs)
		}
	}
	if logs := run(n, policy.WithDenialLog(0)); logs != "" {
		t.Errorf("rate 0 logged:\n%.500s", logs)
	}
	if logs := run(n, policy.WithDenialLog(-3)); logs != "" {
		t.Errorf("rate -3 (0) logged:\n%.500s", logs)
	}
	// 0.25 of about 2000 denials: 500, with a standard deviation of 19.
	if got := strings.Count(run(n, policy.WithDenialLog(0.25)), "\n"); got < 350 || got > 650 {
		t.Errorf("rate 0.25 logged %d of %d denials", got, denials+shadows)
	}
	if logs := run(4, policy.WithDenialLog(1), policy.WithPlainKeys(true)); !strings.Contains(logs, "key="+secret) {
		t.Errorf("with plain keys the key is not in the log:\n%s", logs)
	}
	// The default: DefaultDenialLogRate of them, a few dozen.
	if got := strings.Count(run(n), "\n"); got == 0 || got > 200 {
		t.Errorf("by default %d of %d denials logged, want about %v of them", got, denials+shadows, policy.DefaultDenialLogRate)
	}
}
