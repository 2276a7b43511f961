//go:build integration

package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// TestPeekWritesNothing: peeks, at the server's clock and at a request's
// own, under every algorithm, under limits whose Limit changed (a bucket
// that a decision would convert and store), of a key never seen and of
// several parts, run no writing command and leave every value and TTL as
// they were.
func TestPeekWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(c, prefix())
	lim := sluice.New(store)
	ctx := context.Background()
	var limits, raised []sluice.Limit
	for _, a := range sluice.Algorithms {
		limits = append(limits, sluice.PerMinute(7).Using(a))
		raised = append(raised, sluice.PerMinute(12).Using(a))
	}
	for range 3 {
		if _, err := lim.AllowAll(ctx, "seen", 2, limits...); err != nil {
			t.Fatal(err)
		}
	}
	dump := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		keys, err := c.Do(ctx, c.B().Keys().Pattern("*").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			v, err := c.Do(ctx, c.B().Dump().Key(k).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		return out
	}
	before := dump()
	ttls := make([]time.Duration, len(limits))
	for i, l := range limits {
		var err error
		if ttls[i], err = store.TTL(ctx, "seen", l); err != nil {
			t.Fatal(err)
		}
	}
	if len(before) != len(limits) {
		t.Fatalf("%d keys after the decisions, want %d", len(before), len(limits))
	}
	writes := []string{"set", "del", "incrby", "pexpire", "zadd", "zrem", "zremrangebyscore"}
	calls := func() map[string]int {
		out := map[string]int{}
		for _, w := range writes {
			out[w] = commandCalls(t, c, w)
		}
		return out
	}
	wrote := calls()
	for _, now := range []time.Time{{}, time.Now().Add(20 * time.Second)} {
		for _, ls := range [][]sluice.Limit{limits, raised} {
			for _, parts := range [][]sluice.Part{
				{{Key: "seen", Limits: ls, Cost: 1}},
				{{Key: "seen", Limits: ls, Cost: 7}},
				{{Key: "seen", Limits: ls}},
				{{Key: "never", Limits: ls, Cost: 1}},
				{{Key: "seen", Limits: ls[:2], Cost: 1}, {Key: "never", Limits: ls[2:], Cost: 3}},
			} {
				if _, err := store.Peek(ctx, sluice.Request{Parts: parts, Now: now}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if got := calls(); len(got) != len(wrote) || func() bool {
		for w, n := range got {
			if wrote[w] != n {
				return true
			}
		}
		return false
	}() {
		t.Errorf("writing commands before the peeks %v, after %v", wrote, got)
	}
	after := dump()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed under peeks", k)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d keys after the peeks, %d before: a peek created state", len(after), len(before))
	}
	// The TTLs run down, never up: no peek extended one.
	for i, l := range limits {
		if d, err := store.TTL(ctx, "seen", l); err != nil || d <= 0 || d > ttls[i] {
			t.Errorf("%s: TTL %v, %v after peeks, %v before", l, d, err, ttls[i])
		}
	}
}
