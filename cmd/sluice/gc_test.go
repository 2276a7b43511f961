//go:build integration

package main

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

// TestGCSmall: the collector waits for the floor only while the live
// heap and its roots are at most half of it.
func TestGCSmall(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		floor, live, roots int64
		want               bool
	}{
		{64 * mib, 0, 0, true},
		{64 * mib, 4 * mib, 8 * mib, true},
		{64 * mib, 24 * mib, 8 * mib, true},
		{64 * mib, 24 * mib, 9 * mib, false}, // stacks count
		{64 * mib, 40 * mib, 0, false},
		{64 * mib, 200 * mib, 0, false},
	} {
		if got := gcSmall(tc.floor, tc.live, tc.roots); got != tc.want {
			t.Errorf("gcSmall(%d MiB, %d MiB, %d MiB) = %v, want %v", tc.floor/mib, tc.live/mib, tc.roots/mib, got, tc.want)
		}
	}
}

// TestGCMinHeapFlag: a negative --gc-min-heap-mib is a usage error naming
// the flag.
func TestGCMinHeapFlag(t *testing.T) {
	cfg := writeFile(t, "rules:\n  - {name: r, key: ip, limit: 5, period: 1m}\n")
	_, stderr, code := runBinary(t, nil, "serve", "--config", cfg, "--gc-min-heap-mib", "-1")
	if code != 2 || !strings.Contains(stderr, "--gc-min-heap-mib -1 is negative") {
		t.Errorf("--gc-min-heap-mib -1: exit %d, %s", code, stderr)
	}
}

// TestKeepMinHeap: with a small live heap the collector waits for the
// floor (GOGC off under a memory limit of it); with GOGC or GOMEMLIMIT
// set it is left alone.
func TestKeepMinHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	const floor = 1 << 40 // whatever this test process holds is small
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keepMinHeap(ctx, floor)
	left := os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != ""
	gogc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	switch {
	case left && (gogc != 100 || limit != math.MaxInt64):
		t.Errorf("with GOGC or GOMEMLIMIT set: GOGC %d, limit %d; want them left alone", gogc, limit)
	case !left && (gogc != -1 || limit != floor):
		t.Errorf("a small heap: GOGC %d, memory limit %d; want off and %d", gogc, limit, int64(floor))
	}
}
