package linear_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/linear"
	"github.com/sluice-go/sluice/store/memory"
)

// sequential records the decisions of one client of a memory store: one
// after another, so that the only order porcupine may choose is theirs.
func sequential(t *testing.T) linear.History {
	t.Helper()
	r := linear.Run{Stores: []sluice.Store{memory.New()}, Clients: 1, Rounds: 10, PerRound: 120, Keys: linear.Keys("seq-"), Tick: linear.Tick, Seed: 1}
	return r.Record(t)
}

// TestModelChecksEveryField: a sequential history is linearizable, and
// changing any one field of any one answer (Allowed, Limit, Remaining,
// ResetAfter, RetryAfter, Degraded) makes it not: the model checks the
// whole answer, and a single order leaves porcupine no other to find.
// The history admits and denies on every key, and windows end in it.
func TestModelChecksEveryField(t *testing.T) {
	h := sequential(t)
	m := linear.Model()
	if !porcupine.CheckOperations(m, h) {
		t.Fatal("a sequential history of the memory store is not linearizable")
	}
	admits, denies := map[string]int{}, map[string]int{}
	for _, op := range h {
		k := op.Input.(linear.Input).Key
		if sluice.Combine(op.Output.(linear.Output).Results).Allowed {
			admits[k]++
		} else {
			denies[k]++
		}
	}
	for _, k := range linear.Keys("seq-") {
		if admits[k.Name] < 10 || denies[k.Name] < 10 {
			t.Errorf("key %s: %d admits and %d denies, want at least 10 of each", k.Name, admits[k.Name], denies[k.Name])
		}
	}
	changes := []struct {
		name   string
		change func(*sluice.Result)
	}{
		{"Allowed", func(r *sluice.Result) { r.Allowed = !r.Allowed }},
		{"Limit", func(r *sluice.Result) { r.Limit++ }},
		{"Remaining", func(r *sluice.Result) { r.Remaining++ }},
		{"ResetAfter", func(r *sluice.Result) { r.ResetAfter += time.Microsecond }},
		{"RetryAfter", func(r *sluice.Result) { r.RetryAfter += time.Microsecond }},
		{"Degraded", func(r *sluice.Result) { r.Degraded = sluice.DegradedLocal }},
	}
	for _, c := range changes {
		for _, i := range []int{0, len(h) / 3, len(h) / 2, len(h) - 1} {
			bad := changed(h, i, c.change)
			if porcupine.CheckOperations(m, bad) {
				t.Errorf("decision %d (%s) with its %s changed: porcupine finds it linearizable", i, m.DescribeOperation(h[i].Input, h[i].Output), c.name)
			}
		}
	}
}

// TestServerClockModel: at the store's clock, over ServerKeys, a
// sequential history is linearizable; a changed Allowed or Remaining
// makes it not, a changed ResetAfter or RetryAfter (counted from the
// server's clock, which the model does not know) does not.
func TestServerClockModel(t *testing.T) {
	r := linear.Run{Stores: []sluice.Store{memory.New()}, Clients: 1, Rounds: 2, PerRound: 600, Keys: linear.ServerKeys("srv-"), Tick: linear.Tick, Seed: 1, ServerClock: true}
	h := r.Record(t)
	m := linear.Model()
	if !porcupine.CheckOperations(m, h) {
		t.Fatal("a sequential history of the memory store at its own clock is not linearizable")
	}
	denied := 0
	for _, op := range h {
		if !sluice.Combine(op.Output.(linear.Output).Results).Allowed {
			denied++
		}
	}
	if denied < 100 {
		t.Errorf("%d of %d decisions denied, want at least 100", denied, len(h))
	}
	for _, c := range []struct {
		name   string
		change func(*sluice.Result)
		legal  bool
	}{
		{"Allowed", func(r *sluice.Result) { r.Allowed = !r.Allowed }, false},
		{"Remaining", func(r *sluice.Result) { r.Remaining++ }, false},
		{"ResetAfter", func(r *sluice.Result) { r.ResetAfter += time.Second }, true},
		{"RetryAfter", func(r *sluice.Result) { r.RetryAfter += time.Second }, true},
	} {
		for _, i := range []int{0, len(h) / 2, len(h) - 1} {
			if got := porcupine.CheckOperations(m, changed(h, i, c.change)); got != c.legal {
				t.Errorf("decision %d with its %s changed: linearizable = %v, want %v", i, c.name, got, c.legal)
			}
		}
	}
}

// changed returns a copy of h whose i-th decision's last Result is
// changed by f.
func changed(h linear.History, i int, f func(*sluice.Result)) linear.History {
	bad := append(linear.History(nil), h...)
	rs := append([]sluice.Result(nil), bad[i].Output.(linear.Output).Results...)
	f(&rs[len(rs)-1])
	bad[i].Output = linear.Output{Results: rs}
	return bad
}

// admit returns a decision of cost 1 by client on key under l at now,
// invoked at call and returned at ret, answered as the model answers it
// from state st.
func admit(client int, st linear.State, l sluice.Limit, now, call, ret int64) (porcupine.Operation, linear.State) {
	in := linear.Input{Key: "k", Limits: []sluice.Limit{l}, Cost: 1, Now: now}
	rs, next := linear.Decide(st, in)
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: linear.Output{Results: rs}, Return: ret}, next
}

// TestOrder: two admits that saw the same state are legal in no order,
// whether they overlapped in time or not; two that saw one state after
// the other are legal when they overlap, or when the first returned
// before the second began, and not when the second one did.
func TestOrder(t *testing.T) {
	l := sluice.PerHour(5).Using(sluice.FixedWindow)
	now := linear.Epoch.UnixMicro()
	a, st := admit(0, linear.State{}, l, now, 0, 10)
	b, _ := admit(1, st, l, now, 0, 10)                // saw a's admit
	twin, _ := admit(1, linear.State{}, l, now, 0, 10) // saw the same state as a
	after := func(op porcupine.Operation, call, ret int64) porcupine.Operation {
		op.Call, op.Return = call, ret
		return op
	}
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"one after the other", []porcupine.Operation{a, b}, true},
		{"overlapping", []porcupine.Operation{a, after(b, 5, 15)}, true},
		{"the first in time", []porcupine.Operation{a, after(b, 20, 30)}, true},
		{"the later state first in time", []porcupine.Operation{after(a, 20, 30), b}, false},
		{"twins overlapping", []porcupine.Operation{a, twin}, false},
		{"twins one after the other", []porcupine.Operation{a, after(twin, 20, 30)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(linear.Model(), tc.h); got != tc.want {
				t.Errorf("linearizable = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCheckWritesView: a key that is not linearizable gets an Illegal
// verdict, an error, and porcupine's visualization in $SLUICE_TEST_ARTIFACTS,
// named after the test and the key; a linearizable one gets none.
func TestCheckWritesView(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(linear.ArtifactsEnv, dir)
	l := sluice.PerHour(5).Using(sluice.FixedWindow)
	now := linear.Epoch.UnixMicro()
	a, _ := admit(0, linear.State{}, l, now, 0, 10)
	twin, _ := admit(1, linear.State{}, l, now, 0, 10)
	ok := a
	ok.Input = linear.Input{Key: "fine", Limits: []sluice.Limit{l}, Cost: 1, Now: now}
	vs := linear.Check("Test/x y", linear.History{a, twin, ok})
	if len(vs) != 2 {
		t.Fatalf("%d verdicts, want 2 (one per key): %+v", len(vs), vs)
	}
	fine, bad := vs[0], vs[1] // in key order
	if bad.Key != "k" || bad.Result != porcupine.Illegal || bad.Ops != 2 || bad.Err() == nil {
		t.Errorf("twins: %+v, error %v; want Illegal over 2 decisions, an error", bad, bad.Err())
	}
	want := filepath.Join(dir, "Test_x_y-k.html")
	if bad.View != want || bad.ViewErr != nil {
		t.Errorf("twins: view %q (%v), want %q", bad.View, bad.ViewErr, want)
	}
	if b, err := os.ReadFile(want); err != nil || !strings.Contains(string(b), "<html") {
		t.Errorf("visualization %s: %d bytes, %v; want porcupine's HTML", want, len(b), err)
	}
	if fine.Key != "fine" || fine.Result != porcupine.Ok || fine.View != "" || fine.Err() != nil {
		t.Errorf("fine: %+v, error %v; want Ok, no view, no error", fine, fine.Err())
	}
}

// TestUnknownFails: a search that timed out is a failure, never a pass.
func TestUnknownFails(t *testing.T) {
	v := linear.Verdict{Key: "k", Result: porcupine.Unknown, Ops: 9, Took: linear.CheckTimeout, View: "/tmp/v.html"}
	if err := v.Err(); err == nil || !strings.Contains(err.Error(), "Unknown") {
		t.Errorf("Unknown verdict: error %v, want one saying Unknown", err)
	}
}

// TestRunRefusesShortLived: a run whose state could expire on a Redis
// server while the fake clock still needs it is refused, naming the key
// and the limit; so is a run at the server's clock over limits that time
// matters to.
func TestRunRefusesShortLived(t *testing.T) {
	for _, tc := range []struct {
		l    sluice.Limit
		want string
	}{
		{sluice.PerHour(15), "token interval 4m0s"},
		{sluice.PerMinute(10).Using(sluice.SlidingLog), "period 1m0s"},
		{sluice.Per(10, 11*time.Minute).Using(sluice.FixedWindow), "period 11m0s"},
		{sluice.PerDay(2).Using(sluice.FixedWindow), "capacity 2"},
	} {
		r := linear.Run{Stores: []sluice.Store{memory.New()}, Clients: 1, Rounds: 1, PerRound: 1, Tick: time.Minute,
			Keys: []linear.Key{{Name: "short", Limits: []sluice.Limit{tc.l}}}}
		err := linear.RunError(r)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"short"`) {
			t.Errorf("%s: %v, want an error naming key \"short\" and %q", tc.l, err, tc.want)
		}
	}
	for _, tc := range []struct {
		l    sluice.Limit
		want string
	}{
		{sluice.PerDay(30), "token interval 48m0s"},
		{sluice.Per(100, 100*24*time.Hour).Using(sluice.SlidingWindow), "period 2400h0m0s"},
	} {
		r := linear.Run{Stores: []sluice.Store{memory.New()}, Clients: 1, Rounds: 1, PerRound: 1, Tick: time.Minute, ServerClock: true,
			Keys: []linear.Key{{Name: "short", Limits: []sluice.Limit{tc.l}}}}
		err := linear.RunError(r)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "server's clock") {
			t.Errorf("%s at the server's clock: %v, want an error naming %q and the server's clock", tc.l, err, tc.want)
		}
	}
	srv := linear.Run{Stores: []sluice.Store{memory.New()}, Clients: 1, Rounds: 1, PerRound: 1, Tick: time.Minute, Keys: linear.ServerKeys(""), ServerClock: true}
	if err := linear.RunError(srv); err != nil {
		t.Errorf("ServerKeys: %v", err)
	}
	ok := linear.Run{Stores: []sluice.Store{memory.New()}, Clients: 1, Rounds: 1, PerRound: 1, Tick: time.Minute, Keys: linear.Keys("")}
	if err := linear.RunError(ok); err != nil {
		t.Errorf("Keys: %v", err)
	}
	ok.Tick = linear.Span - time.Microsecond
	if err := linear.RunError(ok); err == nil || !strings.Contains(err.Error(), "tick") {
		t.Errorf("tick below a round's span: %v, want an error naming the tick", err)
	}
}

// TestRoundsSkipWindowEnds: rounds move forward by the tick, at least a
// Span apart, and none decides within Margin of the end of a fixed window
// of any key (its last decision at most Span−Step after its instant).
func TestRoundsSkipWindowEnds(t *testing.T) {
	r := linear.Run{Rounds: 12, Tick: 28 * time.Minute, Keys: []linear.Key{
		{Name: "a", Limits: []sluice.Limit{sluice.PerHour(10).Using(sluice.FixedWindow)}},
		{Name: "b", Limits: []sluice.Limit{sluice.Per(10, 100*time.Minute).Using(sluice.FixedWindow), sluice.PerHour(3)}},
	}}
	got := linear.RoundBases(r)
	for i, at := range got {
		for _, p := range []time.Duration{time.Hour, 100 * time.Minute} {
			if end := at + linear.Span; at%p > p-linear.Margin-linear.Span || (end-1)/p != at/p {
				t.Errorf("round %d at %v: within %v of the end of a %v window", i, at, linear.Margin, p)
			}
		}
		if i > 0 && at < got[i-1]+linear.Span {
			t.Errorf("round %d at %v, round %d at %v: want at least %v apart", i, at, i-1, got[i-1], linear.Span)
		}
	}
	// 28m, 56m: 56m is within 5m50s of 1h, so it moves to 1h.
	if want := []time.Duration{0, 28 * time.Minute, time.Hour}; !slices.Equal(got[:3], want) {
		t.Errorf("rounds at %v, want %v first", got, want)
	}
}
