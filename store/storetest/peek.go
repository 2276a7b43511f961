package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// testPeek: a store's Peek (Store.Peek) answers what its Take answers
// for the same request at the same instant, for every algorithm, for one
// limit, several and several parts, for a key never seen, for costs above
// what remains and under limits whose Limit or Burst changed; and it
// changes nothing: a store that is peeked at between its decisions
// decides exactly as a twin that is not, and a peek creates no state.
func testPeek(t *testing.T, newStore Factory) {
	for i, a := range sluice.Algorithms {
		t.Run(string(a), func(t *testing.T) { peekRandom(t, newStore, []sluice.Algorithm{a}, uint64(500+i)) })
	}
	t.Run("mixed", func(t *testing.T) { peekRandom(t, newStore, sluice.Algorithms, 599) })
	t.Run("cost 0", func(t *testing.T) { peekCostZero(t, newStore) })
}

// peeker returns s: every Store peeks.
func peeker(_ *testing.T, s sluice.Store) sluice.Store { return s }

// peekVariants returns limits of one identity (a minute, no name) of
// algorithm a under several Limits and Bursts, so that a store converts
// state kept under one of them when another reads it: the first is
// testLimit(a).
func peekVariants(a sluice.Algorithm) []sluice.Limit {
	vs := []sluice.Limit{testLimit(a), sluice.PerMinute(4).Using(a), sluice.PerMinute(12).Using(a)}
	if a == sluice.TokenBucket || a == sluice.GCRA {
		vs = append(vs, sluice.PerMinute(7).WithBurst(5).Using(a), sluice.PerMinute(5).WithBurst(9).Using(a))
	}
	return vs
}

// peekRandom plays random requests under limits of algs on two stores of
// the same clock: before each decision, store a is peeked at with the
// request (twice) and with random other requests; then both decide it.
// The peek must equal a's decision, and a's decision b's.
func peekRandom(t *testing.T, newStore Factory, algs []sluice.Algorithm, seed uint64) {
	clock := NewClock()
	a, b := newStore(t, clock.Now), newStore(t, clock.Now)
	pa := peeker(t, a)
	ttl, _ := a.(TTLer)
	rng := rand.New(rand.NewPCG(seed, 13))
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2"}

	// request returns a random request at the clock's time: one part of
	// one limit or two, or two parts, the minute limit's variant and its
	// algorithm at random; costs from minCost to the part's capacity
	// (over what remains, often).
	request := func(step, minCost int) sluice.Request {
		alg := algs[rng.IntN(len(algs))]
		minute := peekVariants(alg)[rng.IntN(len(peekVariants(alg)))]
		hour := sluice.PerHour(10).Using(algs[rng.IntN(len(algs))])
		key := func() string {
			if rng.IntN(7) == 0 {
				return fmt.Sprintf("fresh-%d-%d", step, rng.IntN(1000)) // never seen
			}
			return keys[rng.IntN(len(keys))]
		}
		part := func(limits ...sluice.Limit) sluice.Part {
			c := limits[0].Capacity()
			for _, l := range limits[1:] {
				c = min(c, l.Capacity())
			}
			return sluice.Part{Key: key(), Limits: limits, Cost: minCost + rng.IntN(c-minCost+1)}
		}
		var parts []sluice.Part
		switch rng.IntN(3) {
		case 0:
			parts = []sluice.Part{part(minute)}
		case 1:
			parts = []sluice.Part{part(minute, hour)}
		default:
			// Distinct identities whatever the keys: a minute and an hour.
			parts = []sluice.Part{part(minute), part(hour)}
		}
		return sluice.Request{Parts: parts, Now: clock.Now()}
	}
	var at time.Duration
	for step := range 120 {
		if rng.IntN(3) > 0 {
			at += time.Duration(rng.Int64N(int64(15 * time.Second)))
		}
		// Decisions cost at least 1, out of the last 2s of a window: so
		// every state written lives long in real time too (see safe).
		req := request(step, 1)
		for _, p := range req.Parts {
			at = safe(at, p.Limits...)
		}
		clock.Set(at)
		req.Now = clock.Now()
		peek, err := pa.Peek(ctx, req)
		if err != nil {
			t.Fatalf("step %d: Peek(%s): %v", step, describe(req), err)
		}
		// Other looks, at any cost, under other Limits, at other keys:
		// none may change what a decides.
		for range rng.IntN(4) {
			other := request(step, 0)
			other.Now = req.Now
			if _, err := pa.Peek(ctx, other); err != nil {
				t.Fatalf("step %d: Peek(%s): %v", step, describe(other), err)
			}
		}
		if again, err := pa.Peek(ctx, req); err != nil || !slices.Equal(again, peek) {
			t.Fatalf("step %d: Peek(%s) again = %+v, %v; the first said %+v", step, describe(req), again, err, peek)
		}
		if ttl != nil {
			for _, p := range req.Parts {
				if len(p.Key) < 5 || p.Key[:5] != "fresh" {
					continue
				}
				for _, l := range p.Limits {
					if d, err := ttl.TTL(ctx, p.Key, l); err != nil || d != 0 {
						t.Fatalf("step %d: after peeks at %q, never decided, its state under %s lives %v (%v); a peek must create none", step, p.Key, l, d, err)
					}
				}
			}
		}
		got, err := a.Take(ctx, req)
		if err != nil {
			t.Fatalf("step %d: Take(%s): %v", step, describe(req), err)
		}
		twin, err := b.Take(ctx, req)
		if err != nil {
			t.Fatalf("step %d: Take(%s) on the twin: %v", step, describe(req), err)
		}
		if !slices.Equal(peek, got) {
			t.Errorf("step %d at %v: %s: Peek = %+v, Take = %+v", step, at, describe(req), peek, got)
		}
		if !slices.Equal(got, twin) {
			t.Fatalf("step %d at %v: %s: Take on the store peeked at = %+v, on its twin = %+v: a peek changed the state", step, at, describe(req), got, twin)
		}
	}
}

// peekCostZero: a peek of cost 0 equals a decision of cost 0 on a key
// that has spent, under its own limit and under a lowered one that the
// key already exceeds (denied even at cost 0), for every algorithm.
// Each key is decided at cost 0 last, since that decision may write state
// that lives briefly (see safe).
func peekCostZero(t *testing.T, newStore Factory) {
	ctx := context.Background()
	for _, alg := range sluice.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := NewClock()
			s := newStore(t, clock.Now)
			ps := peeker(t, s)
			vs := peekVariants(alg)
			for i, l := range []sluice.Limit{vs[0], vs[1], vs[2]} {
				key := fmt.Sprintf("zero-%d", i)
				clock.Set(time.Duration(i) * time.Hour)
				spend := sluice.Request{Parts: []sluice.Part{{Key: key, Limits: vs[:1], Cost: 1}}, Now: clock.Now()}
				for range vs[0].Capacity() - 1 {
					if _, err := s.Take(ctx, spend); err != nil {
						t.Fatal(err)
					}
				}
				clock.Set(time.Duration(i)*time.Hour + 3*time.Second)
				look := sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}}}, Now: clock.Now()}
				peek, err := ps.Peek(ctx, look)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.Take(ctx, look)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(peek, got) {
					t.Errorf("%s after %d spent: Peek at cost 0 = %+v, Take at cost 0 = %+v", l, vs[0].Capacity()-1, peek, got)
				}
			}
		})
	}
}

// describe formats req's parts for messages.
func describe(req sluice.Request) string {
	s := ""
	for i, p := range req.Parts {
		if i > 0 {
			s += " + "
		}
		s += fmt.Sprintf("%q cost %d under %v", p.Key, p.Cost, p.Limits)
	}
	return s
}
