package memory_test

import (
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/linear"
	"github.com/sluice-go/sluice/store/memory"
)

// TestLinearizable: the baseline of the linearizability check (package
// internal/testing/linear; the Redis store's run the same in store/redis): 4
// Limiters × 6 clients over one memory store, 12 rounds of 4 decisions
// each on the keys of every algorithm and a multi-limit key, every answer
// explained by one order of the decisions.
func TestLinearizable(t *testing.T) {
	s := memory.New()
	r := linear.Run{Stores: []sluice.Store{s, s, s, s}, Clients: 6, Rounds: 12, PerRound: 4, Keys: linear.Keys("lin-"), Tick: linear.Tick, Seed: 1}
	linear.Require(t, r.Record(t))
}

// TestLinearizableStoreClock: the same at the store's own clock, over
// limits that time does not matter to (linear.ServerKeys).
func TestLinearizableStoreClock(t *testing.T) {
	s := memory.New()
	r := linear.Run{Stores: []sluice.Store{s, s, s, s}, Clients: 6, Rounds: 12, PerRound: 4, Keys: linear.ServerKeys("srv-"), Tick: linear.Tick, Seed: 1, ServerClock: true}
	linear.Require(t, r.Record(t))
}
