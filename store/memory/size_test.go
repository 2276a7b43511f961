package memory_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/storetest"
)

// heapPerKey returns the live heap bytes per key that s holds after n
// distinct keys of the form "203.0.113.<i>" each took one request of l.
func heapPerKey(t testing.TB, s *memory.Store, n int, l sluice.Limit) float64 {
	t.Helper()
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		// A fresh string per key, as a server decodes one per request.
		key := "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
		if _, err := s.Take(ctx, sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: 1}}, Now: storetest.Epoch}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

func TestHeapPerKey(t *testing.T) {
	const n = 200_000
	l := sluice.PerMinute(100).Named("search")
	got := heapPerKey(t, memory.New(), n, l)
	t.Logf("%d distinct keys: %.0f heap bytes per key", n, got)
}
