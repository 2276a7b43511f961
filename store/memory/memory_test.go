package memory_test

import (
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) sluice.Store {
		return memory.New(memory.WithClock(now))
	})
}

// TestConformanceOneShard: with every key in one shard, eviction samples
// the state of other keys on every eighth decision, and the randomized
// sequences step the clock back after that state expired. Before eviction
// spared recently expired state, this run failed every time.
func TestConformanceOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) sluice.Store {
		return memory.New(memory.WithClock(now), memory.WithShards(1))
	})
}

// TestConformanceCapped: a store whose capacity covers the working set of
// every scenario (one shard, 64 entries) decides exactly as an unbounded
// one. With a capacity of 1 this run fails in dozens of places.
func TestConformanceCapped(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) sluice.Store {
		return memory.New(memory.WithClock(now), memory.WithShards(1), memory.WithCapacity(64))
	})
}

// TestShardSize: shards fill whole cache lines, so that two shards locked
// by two cores never share one (64-bit platforms).
func TestShardSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) == 8 && memory.ShardSize%64 != 0 {
		t.Errorf("a shard is %d bytes, want a multiple of 64: adjust its padding", memory.ShardSize)
	}
}
