package metrics

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice/store/memory"
)

// MemoryStore exports the state of s, an in-memory store (the store, or
// the local fallback of a Redis store):
//
//	sluice_memory_evictions_total   entries forgotten because the store was full (Store.Evictions)
//	sluice_memory_keys              entries held (Store.Len)
//	sluice_memory_capacity          most entries held (Store.Capacity)
//
// A later call exports the store it is given instead (a reload that opens
// a new store); the evictions counter then starts again from that store's
// count, which Prometheus reads as a counter reset; nil exports nothing.
func (m *Metrics) MemoryStore(s *memory.Store) {
	c := newMemoryCollector()
	c.store.Store(s)
	var are prometheus.AlreadyRegisteredError
	if err := m.reg.Register(c); errors.As(err, &are) {
		are.ExistingCollector.(*memoryCollector).store.Store(s)
	} else if err != nil {
		panic(err) // the descriptors are constant and valid: unreachable
	}
}

// memoryCollector collects the metrics of the store it holds.
type memoryCollector struct {
	store                       atomic.Pointer[memory.Store]
	evictions, keys, capacities *prometheus.Desc
}

func newMemoryCollector() *memoryCollector {
	return &memoryCollector{
		evictions:  prometheus.NewDesc("sluice_memory_evictions_total", "Entries the in-memory store forgot because it was full (each a client key whose count restarts).", nil, nil),
		keys:       prometheus.NewDesc("sluice_memory_keys", "Entries (client key x limit) the in-memory store holds.", nil, nil),
		capacities: prometheus.NewDesc("sluice_memory_capacity", "Most entries the in-memory store holds.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.evictions
	ch <- c.keys
	ch <- c.capacities
}

// Collect implements prometheus.Collector.
func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.store.Load()
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(s.Evictions()))
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(s.Len()))
	ch <- prometheus.MustNewConstMetric(c.capacities, prometheus.GaugeValue, float64(s.Capacity()))
}
