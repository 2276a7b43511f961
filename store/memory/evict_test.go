package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestIdleKeysEvicted: state of keys that stopped sending disappears as the
// store is used, and Sweep removes the rest.
func TestIdleKeysEvicted(t *testing.T) {
	clock := storetest.NewClock()
	store := memory.New(memory.WithClock(clock.Now))
	lim := sluice.New(store, sluice.WithClock(clock.Now))
	l := sluice.PerMinute(10).Using(sluice.FixedWindow) // state lives until the minute ends
	ctx := context.Background()
	spend := func(prefix string, n int) {
		for i := range n {
			if _, err := lim.Allow(ctx, prefix+strconv.Itoa(i), l); err != nil {
				t.Fatal(err)
			}
		}
	}
	spend("old-", 5000)
	if got := store.Len(); got != 5000 {
		t.Fatalf("Len = %d after 5000 keys, want 5000", got)
	}
	// The old keys' state expired at 1m, and is kept for a minute more, in
	// case the clock steps back into it.
	clock.Set(90 * time.Second)
	if n := store.Sweep(); n != 0 || store.Len() != 5000 {
		t.Errorf("Sweep 30s after the state expired removed %d, left %d; want 0 and 5000", n, store.Len())
	}
	clock.Set(2 * time.Minute)
	spend("new-", 20000)
	if got := store.Len(); got > 20500 {
		t.Errorf("Len = %d after 20000 new keys: most of the 5000 expired keys should have been evicted on the way", got)
	}
	if store.Sweep(); store.Len() != 20000 {
		t.Errorf("Len = %d after Sweep, want the 20000 live keys", store.Len())
	}
	clock.Set(4 * time.Minute)
	if n := store.Sweep(); n != 20000 || store.Len() != 0 {
		t.Errorf("Sweep after every window ended removed %d, left %d; want 20000 and 0", n, store.Len())
	}
}
