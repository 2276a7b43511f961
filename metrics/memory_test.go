package metrics_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/store/memory"
)

// TestMemoryStore: the in-memory store's evictions, entries and capacity
// are exported, and a second store replaces the first.
func TestMemoryStore(t *testing.T) {
	m := metrics.New()
	fill := func(s *memory.Store, keys int) {
		lim := sluice.New(s)
		for i := range keys {
			if _, err := lim.Allow(context.Background(), "k"+strconv.Itoa(i), sluice.PerHour(10)); err != nil {
				t.Fatal(err)
			}
		}
	}
	first := memory.New(memory.WithShards(1), memory.WithCapacity(3))
	fill(first, 5)
	m.MemoryStore(first)
	for _, c := range []struct {
		store    *memory.Store
		want     []string
		wantNone string
	}{
		{first, []string{"sluice_memory_evictions_total 2\n", "sluice_memory_keys 3\n", "sluice_memory_capacity 3\n"}, ""},
		{memory.New(memory.WithShards(1), memory.WithCapacity(10)), []string{"sluice_memory_evictions_total 0\n", "sluice_memory_keys 4\n", "sluice_memory_capacity 10\n"}, "sluice_memory_keys 3\n"},
	} {
		if c.store != first {
			fill(c.store, 4)
			m.MemoryStore(c.store)
		}
		text := scrape(t, m)
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("metrics lack %q:\n%s", w, grep(text, "sluice_memory"))
			}
		}
		if c.wantNone != "" && strings.Contains(text, c.wantNone) {
			t.Errorf("metrics still report the first store (%q):\n%s", c.wantNone, grep(text, "sluice_memory"))
		}
	}
}

// grep returns the lines of text that contain s.
func grep(text, s string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if strings.Contains(line, s) {
			b.WriteString(line)
		}
	}
	return b.String()
}
