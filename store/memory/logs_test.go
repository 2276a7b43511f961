package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// TestLogsSurviveRebuild: the logs of sliding_log entries, kept apart from
// the entries, follow them when a shard is rebuilt after most of its
// entries expired (Sweep), and go with the entries that are deleted.
func TestLogsSurviveRebuild(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { return now }
	s := memory.New(memory.WithShards(1), memory.WithClock(clock))
	lim := sluice.New(s, sluice.WithClock(clock))
	ctx := context.Background()
	l := sluice.PerMinute(5).Using(sluice.SlidingLog)
	allow := func(key string, cost int) sluice.Result {
		t.Helper()
		r, err := lim.AllowN(ctx, key, l, cost)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := range 1000 {
		if r := allow("k"+strconv.Itoa(i), 1); !r.Allowed {
			t.Fatalf("first request of k%d denied: %+v", i, r)
		}
	}
	now = t0.Add(100 * time.Second)
	for i := range 50 {
		if r := allow("k"+strconv.Itoa(i), 3); !r.Allowed || r.Remaining != 2 {
			t.Fatalf("k%d at 100s, cost 3: %+v, want admitted with 2 remaining", i, r)
		}
	}
	now = t0.Add(125 * time.Second)
	if n := s.Sweep(); n != 950 {
		t.Fatalf("Sweep deleted %d entries, want the 950 expired for over a minute", n)
	}
	for i := range 50 {
		r := allow("k"+strconv.Itoa(i), 3)
		if r.Allowed || r.Remaining != 2 || r.RetryAfter != 35*time.Second {
			t.Errorf("k%d after the rebuild, cost 3: %+v; want denied, 2 remaining, retry after 35s (its log of 3 kept)", i, r)
		}
	}
	// A key whose entry was deleted starts afresh.
	if r := allow("k999", 5); !r.Allowed || r.Remaining != 0 {
		t.Errorf("k999 after its entry was deleted, cost 5: %+v, want admitted", r)
	}
}
