package linear_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/linear"
	"github.com/sluice-go/sluice/store/memory"
)

// A fault is what faultyStore does to the decisions it fails.
type fault int

const (
	// lose fails every third decision, alternately after deciding it (its
	// reply lost: applied, and an error) and before (its request lost).
	lose fault = iota
	// twice decides the first decision twice and answers the second: a
	// client that sends a script again after its reply was lost.
	twice
	// twiceFailed decides the first decision twice and fails it: the
	// reply to the second sending was lost too.
	twiceFailed
)

// errLost is the error of the decisions faultyStore fails.
var errLost = errors.New("faulty store: connection reset")

// faultyStore decides through a memory store and, while on, fails
// decisions as its fault says. It keeps its own account of what it
// applied: the cost of each application of a single-limit decision, by
// its instant (what a Ledger key's log holds in Redis).
type faultyStore struct {
	sluice.Store
	fault fault

	mu      sync.Mutex
	on      bool
	n       int           // decisions while on
	units   map[int64]int // cost applied, by instant
	applied int           // failed decisions applied (at least once)
	lost    int           // failed decisions not applied
	doubled int           // decisions applied twice
}

func newFaultyStore(f fault) *faultyStore {
	return &faultyStore{Store: memory.New(), fault: f, units: map[int64]int{}}
}

// set turns the fault on or off.
func (s *faultyStore) set(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = on
}

func (s *faultyStore) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock() // one decision at a time: the account stays exact
	if !s.on {
		return s.apply(ctx, req)
	}
	s.n++
	switch {
	case s.fault == lose && s.n%6 == 3:
		s.applied++
		if _, err := s.apply(ctx, req); err != nil {
			return nil, err
		}
		return nil, errLost
	case s.fault == lose && s.n%6 == 0:
		s.lost++
		return nil, errLost
	case s.fault != lose && s.n == 1:
		s.doubled++
		if _, err := s.apply(ctx, req); err != nil {
			return nil, err
		}
		rs, err := s.apply(ctx, req)
		if s.fault == twiceFailed {
			return nil, errLost
		}
		return rs, err
	}
	return s.apply(ctx, req)
}

// apply decides req through the memory store and accounts for it.
func (s *faultyStore) apply(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	rs, err := s.Store.Take(ctx, req)
	if err == nil && sluice.Combine(rs).Allowed && len(req.Parts) == 1 {
		s.units[req.Now.UnixMicro()] += req.Parts[0].Cost
	}
	return rs, err
}

// faultRounds returns a Run.Fault that turns s's fault on in rounds and
// off in the others.
func faultRounds(s *faultyStore, rounds ...int) func(int) {
	return func(r int) { s.set(slices.Contains(rounds, r)) }
}

// TestFaultsLinearizable: decisions that fail after the store applied
// them, and others that fail before, in three rounds of eight, on the
// keys of every algorithm: each is recorded as indeterminate and the
// history is linearizable, key by key; a run that lost nothing would
// prove nothing, so both kinds must have happened.
func TestFaultsLinearizable(t *testing.T) {
	s := newFaultyStore(lose)
	r := linear.Run{Stores: []sluice.Store{s, s, s, s}, Clients: 4, Rounds: 8, PerRound: 4, Keys: linear.Keys("fault-"),
		Tick: linear.Tick, Seed: 1, Fault: faultRounds(s, 2, 3, 5)}
	h := r.Record(t)
	linear.Require(t, h)
	failed := 0
	for _, v := range linear.Check(t.Name(), h) {
		failed += v.Indeterminate
	}
	if s.applied == 0 || s.lost == 0 || failed != s.applied+s.lost {
		t.Errorf("%d indeterminate decisions recorded; the store failed %d after applying them and %d before: want some of each, and every one recorded",
			failed, s.applied, s.lost)
	}
}

// TestFaultsLedger: on a Ledger key, the account from the store's own
// log says every answered decision was applied once and each failed one
// once or never, as the store did; porcupine agrees.
func TestFaultsLedger(t *testing.T) {
	s := newFaultyStore(lose)
	r := linear.Run{Stores: []sluice.Store{s, s}, Clients: 6, Rounds: 6, PerRound: 4, Keys: []linear.Key{linear.Ledger("ledger")},
		Tick: linear.Tick, Seed: 1, Fault: faultRounds(s, 1, 4)}
	h := r.Record(t)
	a, err := linear.Count(h, "ledger", s.units)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("account: %v", a)
	answered := len(h) - s.applied - s.lost
	if !slices.Equal(a.Answered, []int{0, answered}) || !slices.Equal(a.Failed, []int{s.lost, s.applied}) || a.Extra != 0 || a.Provable() {
		t.Errorf("account %+v; want %d answered applied once, %d failed never and %d once, no extra", a, answered, s.lost, s.applied)
	}
	if a.Phantom == 0 {
		t.Errorf("no failed decision was left unapplied: the run did not exercise both outcomes")
	}
	linear.Require(t, h)
}

// TestFaultsCatchDouble: one decision applied twice, whether its client
// was answered (by the second application) or told it failed, is more
// than any order of the decisions explains: the account proves it, and
// porcupine says Illegal and writes its view.
func TestFaultsCatchDouble(t *testing.T) {
	t.Setenv(linear.ArtifactsEnv, t.TempDir())
	for _, f := range []fault{twice, twiceFailed} {
		t.Run(fmt.Sprint(map[fault]string{twice: "answered", twiceFailed: "failed"}[f]), func(t *testing.T) {
			s := newFaultyStore(f)
			r := linear.Run{Stores: []sluice.Store{s, s}, Clients: 4, Rounds: 4, PerRound: 6, Keys: []linear.Key{linear.Ledger("double")},
				Tick: linear.Tick, Seed: 1, Fault: faultRounds(s, 1)}
			h := r.Record(t)
			a, err := linear.Count(h, "double", s.units)
			if err != nil {
				t.Fatal(err)
			}
			if s.doubled != 1 || a.Extra == 0 || !a.Provable() {
				t.Fatalf("the store doubled %d decisions; account %v: want one, proven", s.doubled, a)
			}
			v := linear.Check(t.Name(), h)[0]
			if v.Result != porcupine.Illegal {
				t.Fatalf("a decision applied twice: porcupine says %s (%v), want Illegal", v.Result, v.Err())
			}
			if fi, err := os.Stat(v.View); err != nil || fi.Size() == 0 {
				t.Errorf("visualization %s: %v", v.View, err)
			}
			t.Logf("account %v: porcupine says %s in %v", a, v.Result, v.Took)
		})
	}
}

// failedOp returns a decision of cost 1 on key k under l at now, invoked
// at call, that failed.
func failedOp(client int, l sluice.Limit, now, call int64) porcupine.Operation {
	in := linear.Input{Key: "k", Limits: []sluice.Limit{l}, Cost: 1, Now: now}
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: linear.Output{Err: errLost.Error()}, Return: linear.Never}
}

// TestIndeterminateOrder: a failed decision may have taken effect at any
// point after its call, or never, and at most once: a later decision
// that saw it applied, or not, is legal; one that saw it applied twice
// is not, nor one that saw it before it was called.
func TestIndeterminateOrder(t *testing.T) {
	l := sluice.PerHour(5).Using(sluice.FixedWindow)
	now := linear.Epoch.UnixMicro()
	fail := failedOp(0, l, now, 10)
	_, once := linear.Decide(linear.State{}, fail.Input.(linear.Input))
	_, twice := linear.Decide(once, fail.Input.(linear.Input))
	sawNone, _ := admit(1, linear.State{}, l, now, 20, 30)
	sawOnce, _ := admit(1, once, l, now, 20, 30)
	sawTwice, _ := admit(1, twice, l, now, 20, 30)
	before := sawOnce
	before.Call, before.Return = 0, 5
	other := failedOp(2, l, now, 12)
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"seen applied", []porcupine.Operation{fail, sawOnce}, true},
		{"seen not applied", []porcupine.Operation{fail, sawNone}, true},
		{"seen applied twice", []porcupine.Operation{fail, sawTwice}, false},
		{"seen applied twice, two failed", []porcupine.Operation{fail, other, sawTwice}, true},
		{"seen before its call", []porcupine.Operation{fail, before}, false},
		{"alone", []porcupine.Operation{fail}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(linear.Model(), tc.h); got != tc.want {
				t.Errorf("linearizable = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBoundedIndeterminate: a history with more than MaxIndeterminate
// failed decisions on one key is refused, naming the key; each failed
// decision gets a ClientId of its own, after the clients'.
func TestBoundedIndeterminate(t *testing.T) {
	l := sluice.PerHour(5).Using(sluice.FixedWindow)
	now := linear.Epoch.UnixMicro()
	ok, _ := admit(3, linear.State{}, l, now, 0, 10)
	h := linear.History{ok}
	for i := range linear.MaxIndeterminate {
		h = append(h, failedOp(i%2, l, now, int64(i)))
	}
	if err := linear.Bounded(h); err != nil {
		t.Fatalf("%d failed decisions on a key: %v", linear.MaxIndeterminate, err)
	}
	for i, op := range h[1:] {
		if op.ClientId != 4+i {
			t.Errorf("failed decision %d has ClientId %d, want %d", i, op.ClientId, 4+i)
		}
	}
	h = append(h, failedOp(0, l, now, 99))
	if err := linear.Bounded(h); err == nil || !strings.Contains(err.Error(), `"k"`) {
		t.Errorf("%d failed decisions on a key: %v, want an error naming the key", linear.MaxIndeterminate+1, err)
	}
}

// TestCountRefusesAmbiguous: the account refuses two decisions at one
// instant, entries that are not a whole number of a decision's cost, and
// entries where no decision was sent.
func TestCountRefusesAmbiguous(t *testing.T) {
	l := linear.LedgerLimit
	now := linear.Epoch.UnixMicro()
	a, _ := admit(0, linear.State{}, l, now, 0, 10)
	a.Input = linear.Input{Key: "k", Limits: []sluice.Limit{l}, Cost: 2, Now: now}
	for _, tc := range []struct {
		name  string
		h     linear.History
		units map[int64]int
		want  string
	}{
		{"one instant twice", linear.History{a, a}, map[int64]int{now: 4}, "two decisions"},
		{"part of a cost", linear.History{a}, map[int64]int{now: 3}, "3 entries"},
		{"no decision", linear.History{a}, map[int64]int{now: 2, now + 1: 1}, "no decision"},
	} {
		if _, err := linear.Count(tc.h, "k", tc.units); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if got, err := linear.Count(linear.History{a}, "k", map[int64]int{now: 2}); err != nil || !slices.Equal(got.Answered, []int{0, 1}) {
		t.Errorf("one decision applied once: %+v, %v", got, err)
	}
}

// BenchmarkCheckFaults measures porcupine on histories with failed
// decisions, the sizes of store/redis's fault runs (2 replicas of 6
// clients, 8 rounds of 4 decisions on the six keys of Keys, every third
// decision of rounds 2 and 5 failing) and twice their clients: an
// operation checks one history (20, recorded first, in turn), and
// max-key-ms is the longest check of one key seen.
//
//	go test -run '^$' -bench CheckFaults ./internal/linear/
func BenchmarkCheckFaults(b *testing.B) {
	for _, clients := range []int{6, 12} {
		b.Run(fmt.Sprintf("clients=%d", 2*clients), func(b *testing.B) {
			var hs []linear.History
			indeterminate := 0
			for seed := range uint64(20) {
				s := newFaultyStore(lose)
				r := linear.Run{Stores: []sluice.Store{s, s}, Clients: clients, Rounds: 8, PerRound: 4, Keys: linear.Keys("bench-"),
					Tick: linear.Tick, Seed: seed, Fault: faultRounds(s, 2, 5)}
				h := r.Record(b)
				hs = append(hs, h)
				for _, op := range h {
					if op.Output.(linear.Output).Err != "" {
						indeterminate++
					}
				}
			}
			var worst time.Duration
			for i := 0; b.Loop(); i++ {
				for _, v := range linear.Check(b.Name(), hs[i%len(hs)]) {
					if v.Result != porcupine.Ok {
						b.Fatal(v.Err())
					}
					worst = max(worst, v.Took)
				}
			}
			b.ReportMetric(float64(worst.Microseconds())/1000, "max-key-ms")
			b.ReportMetric(float64(indeterminate)/float64(len(hs)*6), "failed/key")
		})
	}
}
