// Package linear proves that a sluice.Store decides linearizably: it
// records every decision of many concurrent clients over several replicas
// (its invoke and return times, key, limits, cost, instant and whole
// answer) and checks the history, key by key, with porcupine
// (github.com/anishathalye/porcupine) against a sequential model whose
// step is the project's reference, the algorithms of internal/algo applied
// to the key's state in linearization order.
//
// A count of admits catches a store that admits too much in total; this
// catches one that answers in an order no single sequence of decisions
// explains: two admits that saw the same state, a Remaining, ResetAfter or
// RetryAfter that no order of the concurrent decisions gives.
//
// # Time
//
// Time is part of each decision's input. Every decision carries an
// explicit now (sluice.WithClock) from a fake clock that the run drives
// in rounds (see Run): between rounds it moves by Run.Tick, so windows
// end and buckets refill; within a round, the decisions on a key carry
// instants a second apart, taken as they are sent, so that concurrent
// decisions reach the store with instants out of order (a clock that
// steps back by seconds). The model knows each decision's instant
// exactly and checks Allowed, Limit, Remaining, ResetAfter, RetryAfter
// and Degraded: every field of the answer. The instants run far ahead of
// real time, and every limit is one whose state, once written, lives for
// at least Margin (Run checks it, and no round decides within Margin of
// the end of a fixed window), so a Redis server, which expires keys by
// its own real clock, expires none while a run lasts: the store's state
// is always the model's.
//
// A run with ServerClock set leaves the instant to the store (the Redis
// server's TIME, production's path) over limits so long (ServerKeys)
// that time does not matter to whether a decision is admitted or to its
// Remaining: no window ends and no bucket refills a token while the run
// lasts. The model decides every decision at the instant the run began,
// and checks every field but ResetAfter and RetryAfter, which count from
// the server's clock. (At the instants the clients sent them, out of
// order with the server's, the model's bucket would step back and owe a
// fraction of a token more than the server's.)
//
// # Faults
//
// A decision during a network fault may return an error after the store
// applied it (its reply lost) or before (its request lost): its client
// cannot tell. A Run with a Fault hook records such a decision as
// indeterminate, the standard treatment of Knossos and porcupine (and of
// etcd's robustness tests): its Output carries the error and no answer,
// its Return is Never, so that it may take effect at any point after its
// call, and the model follows both the key's state without it and with it
// applied once (porcupine.NondeterministicModel). Every decision that
// answered is still checked field by field. What no order explains is a
// decision applied twice: a client that sent a script again after its
// reply was lost, charging one request twice, or a request its client
// was told failed. A Ledger key accounts for that exactly, decision by
// decision, from the store's own log (Count).
//
// The package is internal: a harness of this module's store tests, so
// that porcupine is a dependency of tests only and no store author is
// bound to its types (storetest stays the public suite).
package linear

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
)

// Input is what one decision asked: Cost from each of Limits, all or
// nothing, for Key at Now.
type Input struct {
	// Key is the client key.
	Key string
	// Limits are the key's limits, checked together (one, or several:
	// Limiter.AllowAll).
	Limits []sluice.Limit
	// Cost is the request's cost.
	Cost int
	// Now is the instant the decision was asked to decide at, in µs
	// since the Unix epoch; under ServerClock, the instant the run began.
	Now int64
	// ServerClock reports that the store decided at its own clock: the
	// model then checks neither ResetAfter nor RetryAfter.
	ServerClock bool
}

// Output is what one decision answered: one Result per limit of its
// Input, in order; or, for an indeterminate decision, the error it
// returned and no Results.
type Output struct {
	Results []sluice.Result
	// Err is the error of a decision that failed (see "Faults"): its
	// outcome is unknown, and the model takes it as applied once, at any
	// point after its call, or never.
	Err string
}

// State is the model's state of one key: the algo.State of each of its
// limits, in the order of the key's Limits (the zero State before the
// first decision).
type State struct {
	// Limits are the key's limits, for DescribeState.
	Limits []sluice.Limit
	// Of holds the state of each limit.
	Of []algo.State
}

// Model returns the sequential specification every store must meet, per
// key: a decision applies algo.Check to each limit's state at its Now; if
// every limit admits, every limit's state moves on; otherwise none does,
// and a limit that alone would have admitted reports Allowed with its
// state as it is (its Check at cost 0), as sluice.MultiResult documents.
// A decision that answered is legal if and only if its Output is exactly
// the model's; one that failed (Output.Err) leaves two states, the key's
// as it was and as the decision would leave it: porcupine's power-set
// construction (porcupine.NondeterministicModel) follows both, and the
// decisions after it keep whichever explains their answers.
func Model() porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition:         byKey,
		Init:              func() []any { return []any{State{}} },
		Step:              step,
		Equal:             func(a, b any) bool { return equal(a.(State), b.(State)) },
		Hash:              func(s any) uint64 { return hash(s.(State)) },
		DescribeOperation: describeOperation,
		DescribeState:     func(s any) string { return describeState(s.(State)) },
	}
	return m.ToModel()
}

// step returns the states a decision may leave the key in from state:
// none when its answer is not the model's, the next state when it is,
// and both the state as it was and the next one when it failed.
func step(state, input, output any) []any {
	st, in, out := state.(State), input.(Input), output.(Output)
	want, next := Decide(st, in)
	switch {
	case out.Err != "":
		return []any{st, next}
	case answers(in, want, out.Results):
		return []any{next}
	}
	return nil
}

// answers reports whether got is the model's answer want to in: every
// field, or under ServerClock every field but ResetAfter and RetryAfter.
func answers(in Input, want, got []sluice.Result) bool {
	if !in.ServerClock {
		return slices.Equal(want, got)
	}
	return slices.EqualFunc(want, got, func(a, b sluice.Result) bool {
		a.ResetAfter, a.RetryAfter = b.ResetAfter, b.RetryAfter
		return a == b
	})
}

// Decide returns what a store must answer for in when the key's state is
// st, and the state after it. It changes neither st nor in (porcupine
// steps from one state many times while it searches).
func Decide(st State, in Input) ([]sluice.Result, State) {
	now, cost := in.Now, int64(in.Cost)
	cur := State{Limits: in.Limits, Of: make([]algo.State, len(in.Limits))}
	next := State{Limits: in.Limits, Of: make([]algo.State, len(in.Limits))}
	rs := make([]sluice.Result, len(in.Limits))
	allowed := true
	for i, l := range in.Limits {
		c := &cur.Of[i]
		if i < len(st.Of) {
			*c = st.Of[i]
			// The log must not grow into a backing array that another
			// step from this state appends to as well.
			c.Log = slices.Clip(c.Log)
		}
		// Conversion of state kept under another Limit or Burst is
		// written whatever the decision, as every store writes it.
		*c, _, _ = algo.Convert(l, *c, now)
		rs[i], next.Of[i], _ = algo.Check(l, *c, now, cost)
		allowed = allowed && rs[i].Allowed
	}
	if allowed {
		return rs, next
	}
	for i, l := range in.Limits {
		if rs[i].Allowed {
			rs[i], _, _ = algo.Check(l, cur.Of[i], now, 0)
		}
	}
	return rs, cur
}

// byKey partitions a history by key, in key order: decisions on
// different keys share no state, so the history is linearizable if and
// only if each key's is.
func byKey(h []porcupine.Operation) [][]porcupine.Operation {
	var keys []string
	parts := map[string][]porcupine.Operation{}
	for _, op := range h {
		k := op.Input.(Input).Key
		if _, ok := parts[k]; !ok {
			keys = append(keys, k)
		}
		parts[k] = append(parts[k], op)
	}
	slices.Sort(keys)
	out := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		out[i] = parts[k]
	}
	return out
}

func equal(a, b State) bool {
	return slices.EqualFunc(a.Of, b.Of, func(x, y algo.State) bool {
		return x.Set == y.Set && x.A == y.A && x.B == y.B && x.C == y.C && slices.Equal(x.Log, y.Log)
	})
}

func hash(s State) uint64 {
	h := fnv.New64a()
	var b []byte
	for _, x := range s.Of {
		if x.Set {
			b = append(b, 1)
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(x.A))
		b = binary.LittleEndian.AppendUint64(b, uint64(x.B))
		b = binary.LittleEndian.AppendUint64(b, uint64(x.C))
		for _, at := range x.Log {
			b = binary.LittleEndian.AppendUint64(b, uint64(at))
		}
		b = append(b, 0)
	}
	h.Write(b)
	return h.Sum64()
}

// describeOperation is one decision as the visualization shows it: its
// instant (from the fake clock's Epoch), cost and each limit's answer.
func describeOperation(input, output any) string {
	in, out := input.(Input), output.(Output)
	var b strings.Builder
	fmt.Fprintf(&b, "t=%s cost %d →", since(in.Now), in.Cost)
	if out.Err != "" {
		fmt.Fprintf(&b, " failed, applied once or never: %s", out.Err)
		return b.String()
	}
	for i, r := range out.Results {
		if i > 0 {
			b.WriteString(";")
		}
		verdict := "deny"
		if r.Allowed {
			verdict = "ok"
		}
		fmt.Fprintf(&b, " %s rem %d reset %v", verdict, r.Remaining, r.ResetAfter)
		if !r.Allowed {
			fmt.Fprintf(&b, " retry %v", r.RetryAfter)
		}
		if r.Degraded != sluice.NotDegraded {
			fmt.Fprintf(&b, " %v", r.Degraded)
		}
	}
	return b.String()
}

// describeState shows each limit's state, its times from Epoch.
func describeState(s State) string {
	if len(s.Of) == 0 {
		return "none"
	}
	parts := make([]string, len(s.Of))
	for i, x := range s.Of {
		parts[i] = describeOne(s.Limits[i], x)
	}
	return strings.Join(parts, " | ")
}

// describeOne shows x, the state of one limit l, as its algorithm reads
// it (see algo.State).
func describeOne(l sluice.Limit, x algo.State) string {
	if !x.Set {
		return "none"
	}
	us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
	switch l.Algorithm {
	case sluice.FixedWindow:
		return fmt.Sprintf("window at %s: %d", since(x.A*l.Period.Microseconds()), x.B)
	case sluice.SlidingWindow:
		return fmt.Sprintf("window at %s: previous %d, current %d", since(x.A*l.Period.Microseconds()), x.B, x.C)
	case sluice.SlidingLog:
		log := make([]string, len(x.Log))
		for j, at := range x.Log {
			log[j] = since(at)
		}
		return "log [" + strings.Join(log, " ") + "]"
	case sluice.GCRA:
		return fmt.Sprintf("full at %s (interval %v)", since(x.A), us(x.B))
	}
	return fmt.Sprintf("debt %v at %s (interval %v)", us(x.A), since(x.B), us(x.C))
}

// since formats µs since the Unix epoch as the time since Epoch.
func since(us int64) string {
	return (time.Duration(us-Epoch.UnixMicro()) * time.Microsecond).String()
}
