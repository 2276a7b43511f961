package memory_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// flood sends one request of l for each of n distinct keys, the prefix
// and an IPv4 address, 8 to 11 bytes ("10.0.0.0", "10.1.23.45"), each a
// fresh string as a server decodes one per request.
func flood(t testing.TB, s *memory.Store, prefix string, n int, l sluice.Limit) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		key := prefix + "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
		if _, err := s.Take(ctx, sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: 1}}, Now: storetest.Epoch}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHeapPerKey measures the live heap a store holds per distinct key
// (an address under a token bucket named "search") and keeps it below 160
// bytes. Before entries moved into chunks of nodes found through a table
// of 8-byte slots it was 206 bytes at 200,000 keys (207 at 100,000, 248 at
// 300,000, 281 at 500,000); then 123 (130, 117, 118); 112 at 200,000
// since a node holds no pointer to a sliding_log's log (56 bytes, not 64).
//
//	go test -run HeapPerKey -v ./store/memory/
func TestHeapPerKey(t *testing.T) {
	const n = 200_000
	s := memory.New()
	before := liveHeap()
	flood(t, s, "", n, sluice.PerMinute(100).Named("search"))
	got := float64(liveHeap()-before) / n
	runtime.KeepAlive(s)
	t.Logf("%d distinct keys: %.0f heap bytes per key", n, got)
	if got > 160 {
		t.Errorf("%d distinct keys hold %.0f heap bytes each, want at most 160", n, got)
	}
}

// BenchmarkFullStore fills a store of DefaultCapacity (and 100,000 keys
// more, evicted) and reports the live heap per entry held and in all,
// with keys of 8 to 11 bytes and of 124 to 128 (the longest kept as they
// are; longer keys are kept as a 34-byte hash):
//
//	go test -run '^$' -bench FullStore -benchtime 1x ./store/memory/
func BenchmarkFullStore(b *testing.B) {
	for _, c := range []struct {
		name string
		pad  int
	}{{"short_keys", 0}, {"128_byte_keys", 116}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				before := liveHeap()
				s := memory.New()
				flood(b, s, strings.Repeat("x", c.pad), memory.DefaultCapacity+100_000, sluice.PerMinute(100).Named("search"))
				grown := liveHeap() - before
				b.ReportMetric(float64(grown)/float64(s.Len()), "B/entry")
				b.ReportMetric(float64(grown)/(1<<20), "MiB")
				runtime.KeepAlive(s)
			}
		})
	}
}
