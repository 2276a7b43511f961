package memory_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// take decides one request of key under l at the clock's time.
func take(t testing.TB, s *memory.Store, key string, l sluice.Limit, now time.Time) sluice.Result {
	t.Helper()
	rs, err := s.Take(context.Background(), sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: 1}}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

// TestLRU: a full store forgets its least recently used entry, counts it,
// and the forgotten key starts afresh while the others keep their state.
func TestLRU(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithShards(1), memory.WithCapacity(3))
	if s.Capacity() != 3 {
		t.Fatalf("Capacity() = %d, want 3", s.Capacity())
	}
	l := sluice.PerHour(1).Using(sluice.FixedWindow)
	for _, k := range []string{"a", "b", "c"} {
		if !take(t, s, k, l, clock.Now()).Allowed {
			t.Fatalf("first request of %q denied", k)
		}
	}
	if r := take(t, s, "a", l, clock.Now()); r.Allowed { // a: now the most recently used
		t.Fatalf("second request of a admitted: %+v", r)
	}
	if s.Evictions() != 0 || s.Len() != 3 {
		t.Fatalf("before the store is over capacity: Evictions() = %d, Len() = %d; want 0 and 3", s.Evictions(), s.Len())
	}
	take(t, s, "d", l, clock.Now()) // evicts b, the least recently used
	if s.Evictions() != 1 || s.Len() != 3 {
		t.Fatalf("after a fourth key: Evictions() = %d, Len() = %d; want 1 and 3", s.Evictions(), s.Len())
	}
	for _, c := range []struct {
		key     string
		allowed bool
	}{
		{"a", false}, {"c", false}, {"d", false}, // kept: still limited
		{"b", true}, // forgotten: starts afresh (and evicts a, now the oldest)
	} {
		if r := take(t, s, c.key, l, clock.Now()); r.Allowed != c.allowed {
			t.Errorf("after eviction, request of %q: allowed = %v, want %v", c.key, r.Allowed, c.allowed)
		}
	}
	if s.Evictions() != 2 {
		t.Errorf("Evictions() = %d, want 2", s.Evictions())
	}
}

// TestCapacitySplit: the capacity is split over the shards, fewer of them
// for a small capacity, and a store is bounded by default.
func TestCapacitySplit(t *testing.T) {
	for _, c := range []struct {
		opts []memory.Option
		want int
	}{
		{nil, memory.DefaultCapacity},
		{[]memory.Option{memory.WithCapacity(0)}, memory.DefaultCapacity},
		{[]memory.Option{memory.WithCapacity(-5)}, memory.DefaultCapacity},
		{[]memory.Option{memory.WithCapacity(1)}, 1},
		{[]memory.Option{memory.WithCapacity(100)}, 100},                     // one shard of 100
		{[]memory.Option{memory.WithCapacity(1000)}, 1000},                   // 8 shards of 125
		{[]memory.Option{memory.WithCapacity(100_000)}, 100_096},             // 256 shards of 391
		{[]memory.Option{memory.WithShards(4), memory.WithCapacity(10)}, 10}, // 1 shard
		{[]memory.Option{memory.WithCapacity(10_000), memory.WithShards(16)}, 10_000},
	} {
		if got := memory.New(c.opts...).Capacity(); got != c.want {
			t.Errorf("Capacity() = %d, want %d", got, c.want)
		}
	}
}

// liveHeap returns the live heap in bytes after a collection.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestFloodBounded: a flood of distinct keys twenty times the capacity
// leaves the store at its capacity, with a live heap bounded by the
// capacity (at most 400 bytes per entry, over twice the measured cost),
// not by the flood: unbounded, this flood holds about 30 MB.
func TestFloodBounded(t *testing.T) {
	const capacity, flood = 10_000, 200_000
	clock := storetest.NewClock()
	before := liveHeap()
	s := memory.New(memory.WithClock(clock.Now), memory.WithCapacity(capacity))
	l := sluice.PerHour(100).Using(sluice.SlidingWindow).Named("search")
	for i := range flood {
		take(t, s, "flood:"+strconv.Itoa(i), l, clock.Now())
	}
	grown := liveHeap() - before
	if got, max := s.Len(), s.Capacity(); got > max || got < capacity*9/10 {
		t.Errorf("Len() = %d after the flood, want at most the capacity %d and close to it", got, max)
	}
	if got, want := s.Evictions(), uint64(flood-s.Len()); got != want {
		t.Errorf("Evictions() = %d, want %d (every key that is not held)", got, want)
	}
	if bound := int64(s.Capacity()) * 400; grown > bound {
		t.Errorf("the live heap grew by %d bytes after %d keys into a store of %d, want at most %d", grown, flood, s.Capacity(), bound)
	}
	t.Logf("%d keys into a store of %d: live heap +%d bytes (%.0f per entry held)", flood, s.Capacity(), grown, float64(grown)/float64(s.Len()))
	runtime.KeepAlive(s)
}

// TestFloodMemoryReturns: once a flood's state has expired for over the
// minute of grace, Sweep drops it and the memory returns (the shards'
// tables are rebuilt), whether or not traffic follows.
func TestFloodMemoryReturns(t *testing.T) {
	const flood = 100_000
	clock := storetest.NewClock()
	before := liveHeap()
	s := memory.New(memory.WithClock(clock.Now))
	l := sluice.PerMinute(10).Using(sluice.FixedWindow) // state lives until the minute ends
	for i := range flood {
		take(t, s, "flood:"+strconv.Itoa(i), l, clock.Now())
	}
	grown := liveHeap() - before
	clock.Set(90 * time.Second) // expired, but within the minute of grace
	if n := s.Sweep(); n != 0 || s.Len() != flood {
		t.Fatalf("Sweep within the grace minute deleted %d, left %d; want 0 and %d", n, s.Len(), flood)
	}
	clock.Set(2*time.Minute + time.Second)
	if n := s.Sweep(); n != flood || s.Len() != 0 {
		t.Fatalf("Sweep after the grace minute deleted %d, left %d; want %d and 0", n, s.Len(), flood)
	}
	left := liveHeap() - before
	if left > grown/10 {
		t.Errorf("the flood took %d bytes of live heap and %d are still held after every key was dropped; want at most a tenth", grown, left)
	}
	if s.Evictions() != 0 {
		t.Errorf("Evictions() = %d, want 0: expired state is no capacity eviction", s.Evictions())
	}
	t.Logf("flood of %d keys: +%d bytes, %d after Sweep", flood, grown, left)
	runtime.KeepAlive(s)
}

// TestExpiredDroppedByTraffic: with no Sweep, traffic on other keys drops
// the flood's expired state and returns its memory.
func TestExpiredDroppedByTraffic(t *testing.T) {
	const flood = 50_000
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithShards(8))
	l := sluice.PerSecond(10).Using(sluice.GCRA)
	for i := range flood {
		take(t, s, "flood:"+strconv.Itoa(i), l, clock.Now())
	}
	clock.Set(2 * time.Minute)
	for i := 0; s.Len() > flood/10 && i < 2*flood; i++ {
		take(t, s, "new:"+strconv.Itoa(i%100), l, clock.Now())
	}
	if got := s.Len(); got > flood/10 {
		t.Errorf("Len() = %d after traffic on 100 new keys, want the expired flood mostly dropped", got)
	}
}

// TestCappedMatchesUnbounded: a store whose capacity is the working set
// decides every request exactly as a store with room to spare, and
// evicts nothing.
func TestCappedMatchesUnbounded(t *testing.T) {
	const keys = 40
	clock := storetest.NewClock()
	capped := memory.New(memory.WithClock(clock.Now), memory.WithShards(1), memory.WithCapacity(keys*2))
	free := memory.New(memory.WithClock(clock.Now))
	limits := []sluice.Limit{
		sluice.PerSecond(5).Using(sluice.TokenBucket).WithBurst(8),
		sluice.PerSecond(3).Using(sluice.SlidingLog),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	at := time.Duration(0)
	for range 20_000 {
		at += time.Duration(rng.IntN(20_000)) * time.Microsecond
		req := sluice.Request{Parts: []sluice.Part{{Key: "k" + strconv.Itoa(rng.IntN(keys)), Limits: limits, Cost: rng.IntN(3)}}, Now: storetest.Epoch.Add(at)}
		a, errA := capped.Take(ctx, req)
		b, errB := free.Take(ctx, req)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("at %v, key %s: capped store %+v, unbounded %+v", at, req.Parts[0].Key, a[i], b[i])
			}
		}
	}
	if capped.Evictions() != 0 {
		t.Errorf("Evictions() = %d with a capacity of the working set, want 0", capped.Evictions())
	}
}

// TestEvictionConcurrent: while workers flood a small store with distinct
// keys (thousands of evictions), hot keys that every worker touches between
// every 8 flood keys are never the least recently used of their shard, so
// they are never evicted, and each admits exactly its limit.
func TestEvictionConcurrent(t *testing.T) {
	const (
		workers = 4
		rounds  = 1000 // per worker: 8 flood keys and one request per hot key
		hot     = 4
		limit   = 500 // below workers × rounds requests per hot key
	)
	clock := storetest.NewClock()
	// 4 shards of 128: between two touches of a hot key its shard takes at
	// most workers × 8 = 32 new keys.
	s := memory.New(memory.WithClock(clock.Now), memory.WithShards(4), memory.WithCapacity(512))
	l := sluice.PerHour(limit).Using(sluice.FixedWindow)
	var admitted [hot]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				for h := range hot {
					if take(t, s, "hot:"+strconv.Itoa(h), l, clock.Now()).Allowed {
						admitted[h].Add(1)
					}
				}
				for i := range 8 {
					take(t, s, "flood:"+strconv.Itoa(w)+":"+strconv.Itoa(r)+":"+strconv.Itoa(i), l, clock.Now())
				}
			}
		})
	}
	wg.Wait()
	const floodKeys = workers * rounds * 8
	if got := s.Evictions(); got < floodKeys-uint64(s.Capacity()) {
		t.Errorf("Evictions() = %d, want at least %d", got, floodKeys-s.Capacity())
	}
	// Every key was inserted once unless it was evicted and came back.
	if back := int(s.Evictions()) + s.Len() - floodKeys - hot; back != 0 {
		t.Errorf("%d entries were inserted again after eviction, want 0: hot keys were evicted", back)
	}
	for h := range hot {
		if got := admitted[h].Load(); got != limit {
			t.Errorf("hot key %d admitted %d, want exactly %d", h, got, limit)
		}
	}
}

// TestDecisionAboveCapacity: a decision that writes more entries to a
// shard than the shard's capacity keeps them all until a later decision
// needs the room: forgetting part of the decision it just made would let
// every request through (each forgets the state of another of its
// limits), and leave the state of a decision half written.
func TestDecisionAboveCapacity(t *testing.T) {
	hour := sluice.PerHour(2).Using(sluice.FixedWindow)
	other := sluice.PerHour(3).Using(sluice.FixedWindow).Named("other")
	for _, c := range []struct {
		name     string
		capacity int
		parts    []sluice.Part
	}{
		{"two limits, capacity 1", 1, []sluice.Part{{Key: "k", Limits: []sluice.Limit{hour, other}, Cost: 1}}},
		{"two parts, capacity 1", 1, []sluice.Part{{Key: "k", Limits: []sluice.Limit{hour}, Cost: 1}, {Key: "j", Limits: []sluice.Limit{hour}, Cost: 1}}},
		{"three entries, capacity 2", 2, []sluice.Part{{Key: "k", Limits: []sluice.Limit{hour, other}, Cost: 1}, {Key: "j", Limits: []sluice.Limit{hour}, Cost: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := storetest.NewClock()
			s := memory.New(memory.WithClock(clock.Now), memory.WithCapacity(c.capacity))
			admitted := 0
			for range 10 {
				rs, err := s.Take(context.Background(), sluice.Request{Parts: c.parts})
				if err != nil {
					t.Fatal(err)
				}
				all := true
				for _, r := range rs {
					all = all && r.Allowed
				}
				if all {
					admitted++
				}
			}
			if admitted != 2 {
				t.Errorf("%d of 10 requests admitted under a limit of 2 per hour, want 2 (Len %d, Evictions %d)", admitted, s.Len(), s.Evictions())
			}
			// The next decision on other keys makes room: the store is
			// back within its capacity.
			take(t, s, "x", hour, clock.Now())
			if s.Len() > s.Capacity() {
				t.Errorf("Len() = %d after a decision of one entry, want at most the capacity %d", s.Len(), s.Capacity())
			}
		})
	}
}

// TestExpiredNotCountedAsEvictions: a full store whose least recently
// used entries have expired makes room by dropping them, and Evictions
// does not count them: their keys lose nothing (their next request starts
// afresh as it would have), and the metric must not ask for a capacity
// that is not needed.
func TestExpiredNotCountedAsEvictions(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithCapacity(64))
	l := sluice.PerSecond(1).Using(sluice.FixedWindow) // state lives a second
	for i := range 64 {
		take(t, s, "old"+strconv.Itoa(i), l, clock.Now())
	}
	for _, at := range []time.Duration{2 * time.Second, 2 * time.Minute} { // expired; then expired for over the grace minute
		clock.Set(at)
		for i := range 64 {
			take(t, s, strconv.Itoa(int(at))+":"+strconv.Itoa(i), l, clock.Now())
		}
		if s.Len() != 64 || s.Evictions() != 0 {
			t.Errorf("64 new keys at %v into a full store of expired state: Len() = %d, Evictions() = %d; want 64 and 0", at, s.Len(), s.Evictions())
		}
	}
	for i := range 64 { // live state forgotten: counted
		take(t, s, "new"+strconv.Itoa(i), l, clock.Now())
	}
	if s.Evictions() != 64 {
		t.Errorf("64 new keys into a full store of live state: Evictions() = %d, want 64", s.Evictions())
	}
}

// TestSweepEvery: SweepEvery drops expired state with no traffic, at an
// interval of at least a second, and returns once its context is done.
func TestSweepEvery(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now))
	l := sluice.PerMinute(1).Using(sluice.FixedWindow)
	for i := range 100 {
		take(t, s, "k"+strconv.Itoa(i), l, clock.Now())
	}
	clock.Set(2*time.Minute + time.Second) // expired for over the grace minute
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.SweepEvery(ctx, 0) // a second
	}()
	for start := time.Now(); s.Len() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			cancel()
			t.Fatalf("Len() = %d 30s into SweepEvery, want 0", s.Len())
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("SweepEvery did not return 30s after its context was done")
	}
}
