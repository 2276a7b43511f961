package main

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// defaultGCMinHeapMiB is --gc-min-heap-mib's default. A decision service
// keeps a small live heap (a few MiB, with the memory store's keys or
// without) and allocates per request, so under GOGC=100 the collector
// runs every few MiB allocated: at 256 callers on the memory store, 40%
// of serve's CPU was GC and allocation (pprof), and collecting only at
// 64 MiB cut its CPU per decision by about a third. A server can spare
// 64 MiB; a live heap beyond half of it (a memory store of a few hundred
// thousand keys) is collected as under GOGC=100.
const defaultGCMinHeapMiB = 64

// gcTuneEvery is how often keepMinHeap looks at the live heap: it moves
// slowly.
const gcTuneEvery = 500 * time.Millisecond

// gcSmall reports whether a live heap of live bytes with roots (goroutine
// stacks and globals) of roots bytes is small enough for a floor of
// floor bytes: at most half of it, so that the collector, running when
// the Go runtime's memory nears the floor, frees at least half of it.
func gcSmall(floor, live, roots int64) bool { return 2*(live+roots) <= floor }

// keepMinHeap has the garbage collector run only when the Go runtime's
// memory nears floor bytes while the live heap is small (gcSmall): GOGC
// off under a soft memory limit of floor (debug.SetMemoryLimit). Once
// the live heap outgrows it, GOGC is 100 and no limit again, as without
// it. It looks every gcTuneEvery until ctx ends. It does nothing for a
// floor of 0, or when GOGC or GOMEMLIMIT is set (the operator's choice).
func keepMinHeap(ctx context.Context, floor int64) {
	if floor <= 0 || os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	small := false
	tune := func() {
		metrics.Read(sample)
		var v [3]int64
		for i, s := range sample {
			if s.Value.Kind() != metrics.KindUint64 {
				return // not in this runtime: leave the collector alone
			}
			v[i] = int64(s.Value.Uint64())
		}
		switch now := gcSmall(floor, v[0], v[1]+v[2]); {
		case now && !small:
			debug.SetMemoryLimit(floor)
			debug.SetGCPercent(-1)
		case !now && small:
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
		default:
			return
		}
		small = !small
	}
	tune()
	go every(ctx, gcTuneEvery, tune)
}
