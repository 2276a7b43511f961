package policy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// tokens settles from X-Tokens-Used.
var tokens = &policy.Settle{CostFrom: policy.CostSource{Header: "X-Tokens-Used"}}

// settleRules: a token budget of 10,000 per hour that reserves 4,096 and
// settles, beside a count of requests in another group and a shadow
// budget that settles on its own.
func settleRules() []policy.Rule {
	return []policy.Rule{
		{Name: "tokens", Match: "/v1/chat", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}, Limits: perHour(10_000), Cost: 4096, Settle: tokens},
		{Name: "requests", Group: "count", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}, Limits: perHour(100)},
		{Name: "shadow-tokens", Group: "audit", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}, Limits: perHour(5000), Cost: 4096, Settle: tokens, Shadow: true},
	}
}

// used returns a cost function giving n to every rule that settles.
func used(n int) func(*policy.Applied) (int, bool) {
	return func(*policy.Applied) (int, bool) { return n, true }
}

// TestDecideSettle: a request under a rule that settles is admitted at
// its reserve and settled at its cost; the rules that do not settle keep
// their cost, a rule in shadow mode settles too, an unknown cost keeps
// the reserve, a cost above it is a debt, and a decision settles once.
func TestDecideSettle(t *testing.T) {
	f := newFixture(t, settleRules())
	ctx := context.Background()
	chat := func() *policy.Decision {
		t.Helper()
		d := f.decide(request("POST", "/v1/chat", "192.0.2.1", "X-API-Key", "k1"))
		if !d.Allowed || !d.Settled() {
			t.Fatalf("a chat call: allowed %v, settled %v; want both", d.Allowed, d.Settled())
		}
		return d
	}
	d := chat()
	if got := f.remaining("tokens", "k1"); !slices.Equal(got, []int{10_000 - 4096}) {
		t.Fatalf("tokens after the reserve: %v, want [%d]", got, 10_000-4096)
	}
	if err := d.Settle(ctx, used(1000)); err != nil {
		t.Fatal(err)
	}
	if r := d.Applied[0].Result(); d.Applied[0].Rule.Name != "tokens" || r.Remaining != 9000 {
		t.Errorf("Settle(1000): tokens %+v, want 9000 remaining", r)
	}
	for rule, want := range map[string]int{"tokens": 9000, "requests": 99, "shadow-tokens": 4000} {
		if got := f.remaining(rule, "k1"); !slices.Equal(got, []int{want}) {
			t.Errorf("%s after a settle at 1000: %v, want [%d]", rule, got, want)
		}
	}
	if err := d.Settle(ctx, used(1000)); !errors.Is(err, sluice.ErrSettled) {
		t.Errorf("a second Settle: %v, want ErrSettled", err)
	}

	unknown := chat()
	if err := unknown.Settle(ctx, func(*policy.Applied) (int, bool) { return 0, false }); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining("tokens", "k1"); !slices.Equal(got, []int{9000 - 4096}) {
		t.Errorf("tokens after a settle of unknown cost: %v, want [%d], the reserve kept", got, 9000-4096)
	}
	if err := chat().Settle(ctx, used(-1)); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("Settle(-1): %v, want ErrInvalidCost", err)
	}

	// 4904 left, minus the 4096 the failed settle kept: 808. A call that
	// used 5000 leaves a debt, and the next call is denied.
	if got := f.remaining("tokens", "k1"); !slices.Equal(got, []int{808}) {
		t.Fatalf("tokens before the debt: %v, want [808]", got)
	}
	small := []policy.Rule{{Name: "tokens", Match: "/v1/chat", Key: policy.Key{Source: policy.KeyHeader, Name: "X-Api-Key"}, Limits: perHour(10_000), Cost: 800, Settle: tokens}}
	set, err := policy.Compile(small)
	if err != nil {
		t.Fatal(err)
	}
	f.e.Update(set)
	debt := chat()
	if err := debt.Settle(ctx, used(5000)); err != nil {
		t.Fatal(err)
	}
	if r := debt.Applied[0].Result(); r.Allowed || r.RetryAfter <= 0 {
		t.Errorf("after a settle in debt: %+v, want denied with a RetryAfter", r)
	}
	if d := f.decide(request("POST", "/v1/chat", "192.0.2.1", "X-API-Key", "k1")); d.Allowed {
		t.Error("a call while in debt was admitted")
	}
}

// TestPostpaid: a rule of cost 1 that settles admits a call while the
// balance holds a unit and charges its whole cost after: the balance
// overshoots by at most the calls in flight.
func TestPostpaid(t *testing.T) {
	f := newFixture(t, []policy.Rule{{Name: "budget", Key: policy.Key{Source: policy.KeyRequest}, Limits: perHour(1000), Cost: 1, Settle: tokens}})
	ctx := context.Background()
	var inFlight []*policy.Decision
	for range 3 { // three calls in flight at once, each to cost 400
		d, err := f.e.Check(ctx, policy.Check{Rule: "budget", Key: "k"})
		if err != nil || !d.Allowed {
			t.Fatalf("call %d: %+v, %v", len(inFlight), d, err)
		}
		inFlight = append(inFlight, d)
	}
	for _, d := range inFlight {
		if err := d.Settle(ctx, used(400)); err != nil {
			t.Fatal(err)
		}
	}
	// 1200 charged of 1000: 200 of debt, at most the in-flight calls' costs.
	if d, err := f.e.Check(ctx, policy.Check{Rule: "budget", Key: "k"}); err != nil || d.Allowed {
		t.Fatalf("a call with the budget overspent: %+v, %v; want a denial", d, err)
	}
}

// TestTicket: a decision the decision service reserved travels as a
// Ticket to another process's engine over the same store, which settles
// it exactly; a reloaded rule that no longer settles, or whose limit
// changed identity, leaves nothing to settle.
func TestTicket(t *testing.T) {
	rules := []policy.Rule{
		{Name: "tokens", Key: policy.Key{Source: policy.KeyRequest}, Limits: []sluice.Limit{sluice.PerHour(10_000).Using(sluice.FixedWindow), sluice.PerMinute(5000).Using(sluice.FixedWindow)}, Cost: 4096, Settle: tokens},
		{Name: "calls", Key: policy.Key{Source: policy.KeyRequest}, Limits: perHour(100)},
	}
	clock := storetest.NewClock()
	store := memory.New(memory.WithClock(clock.Now))
	f := newFixtureOn(t, sluice.New(store, sluice.WithClock(clock.Now)), clock, rules)
	ctx := context.Background()
	d, err := f.e.Check(ctx, policy.Check{Rule: "tokens", Key: "k"}, policy.Check{Rule: "calls", Key: "k"})
	if err != nil || !d.Allowed {
		t.Fatalf("Check: %+v, %v", d, err)
	}
	ticket, ok := d.Ticket()
	if !ok || len(ticket.Parts) != 1 || ticket.Parts[0].Rule != "tokens" || len(ticket.Parts[0].Limits) != 2 {
		t.Fatalf("Ticket: %+v, %v; want the tokens rule's part, of two limits", ticket, ok)
	}
	// Another replica: its own Limiter and Engine over the same store.
	other := newFixtureOn(t, sluice.New(store, sluice.WithClock(clock.Now)), clock, rules)
	clock.Set(10 * time.Second)
	resumed, err := other.e.Resume(ctx, ticket)
	if err != nil {
		t.Fatal(err)
	}
	if err := resumed.Settle(ctx, used(1500)); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining("tokens", "k"); !slices.Equal(got, []int{8500, 3500}) {
		t.Errorf("tokens after a settle elsewhere at 1500: %v, want [8500 3500]", got)
	}
	if got := f.remaining("calls", "k"); !slices.Equal(got, []int{99}) {
		t.Errorf("calls: %v, want [99]: a rule that does not settle keeps its cost", got)
	}
	// A retried settle, on either replica, is refused: it never refunds
	// twice. A ticket whose expiry was changed is not one.
	for _, e := range []*policy.Engine{other.e, f.e} {
		if _, err := e.Resume(ctx, ticket); !errors.Is(err, sluice.ErrSettled) {
			t.Errorf("a second Resume: %v, want ErrSettled", err)
		}
	}
	forged := ticket
	forged.ID, forged.Expires = "another", forged.Expires.Add(time.Hour)
	if _, err := f.e.Resume(ctx, forged); !errors.Is(err, policy.ErrTicket) {
		t.Errorf("Resume of a ticket with a later expiry: %v, want ErrTicket", err)
	}
	if got := f.remaining("tokens", "k"); !slices.Equal(got, []int{8500, 3500}) {
		t.Errorf("tokens after the refused settles: %v, want [8500 3500]", got)
	}

	// A reload: the minute limit becomes a sliding window (another
	// identity), and a second ticket, in the next minute, settles the
	// hour only.
	clock.Set(70 * time.Second)
	d, err = f.e.Check(ctx, policy.Check{Rule: "tokens", Key: "k"})
	if err != nil || !d.Allowed {
		t.Fatalf("Check: %+v, %v", d, err)
	}
	ticket, _ = d.Ticket()
	changed := slices.Clone(rules)
	changed[0].Limits = []sluice.Limit{rules[0].Limits[0], sluice.PerMinute(5000).Using(sluice.SlidingWindow)}
	set, err := policy.Compile(changed)
	if err != nil {
		t.Fatal(err)
	}
	other.e.Update(set)
	resumed, err = other.e.Resume(ctx, ticket)
	if err != nil {
		t.Fatal(err)
	}
	if len(resumed.Applied) != 1 || len(resumed.Applied[0].Limits) != 1 {
		t.Fatalf("resumed after the reload: %+v, want the hour limit alone", resumed.Applied)
	}
	if err := resumed.Settle(ctx, used(0)); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining("tokens", "k"); !slices.Equal(got, []int{8500, 5000 - 4096}) {
		t.Errorf("tokens after a settle at 0 of the hour alone: %v, want [8500 904]", got)
	}
	changed[0].Settle = nil
	if set, err = policy.Compile(changed); err != nil {
		t.Fatal(err)
	}
	other.e.Update(set)
	if _, err := other.e.Resume(ctx, ticket); !errors.Is(err, policy.ErrTicketStale) {
		t.Errorf("Resume under a rule that no longer settles: %v, want ErrTicketStale", err)
	}
	// The ticket has expired an hour after its take.
	clock.Set(70*time.Second + time.Hour + time.Microsecond)
	d, err = f.e.Check(ctx, policy.Check{Rule: "tokens", Key: "k"})
	if err != nil || !d.Allowed {
		t.Fatalf("Check: %+v, %v", d, err)
	}
	late, _ := d.Ticket()
	clock.Set(70*time.Second + 2*time.Hour + 2*time.Microsecond)
	if _, err := f.e.Resume(ctx, late); !errors.Is(err, policy.ErrTicketExpired) {
		t.Errorf("Resume an hour after the take: %v, want ErrTicketExpired", err)
	}
}

// TestSettleObserver: the engine tells its SettleObserver of the units
// each settle gave back or charged, and each refund gave back.
func TestSettleObserver(t *testing.T) {
	clock := storetest.NewClock()
	set, err := policy.Compile([]policy.Rule{{Name: "budget", Key: policy.Key{Source: policy.KeyRequest}, Limits: perHour(10_000), Cost: 100, Settle: tokens}})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	e := policy.New(sluice.New(memory.New(memory.WithClock(clock.Now)), sluice.WithClock(clock.Now)), set,
		policy.WithSettleObserver(func(rule string, refunded, charged int) {
			seen = append(seen, fmt.Sprintf("%s -%d +%d", rule, refunded, charged))
		}))
	ctx := context.Background()
	for _, n := range []int{30, 100, 250} {
		d, err := e.Check(ctx, policy.Check{Rule: "budget", Key: "k"})
		if err != nil || !d.Allowed {
			t.Fatalf("Check: %+v, %v", d, err)
		}
		if err := d.Settle(ctx, used(n)); err != nil {
			t.Fatal(err)
		}
	}
	seven := 7
	if _, err := e.Refund(ctx, policy.Check{Rule: "budget", Key: "k", Cost: &seven}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"budget -70 +0", "budget -0 +150", "budget -7 +0"}; !slices.Equal(seen, want) {
		t.Errorf("observed %q, want %q (a settle at the reserve is none)", seen, want)
	}
}
