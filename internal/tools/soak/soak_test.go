package main

import (
	"testing"
	"time"
)

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		status string
		want   int64
		ok     bool
	}{
		{"Name:\tsluice\nVmPeak:\t  9000 kB\nVmRSS:\t   20480 kB\nThreads: 7\n", 20480 << 10, true},
		{"VmRSS: 1 kB", 1 << 10, true},
		{"Name:\tsluice\n", 0, false},
		{"VmRSS:\t12 MB\n", 0, false},
		{"VmRSS:\tx kB\n", 0, false},
	}
	for _, tt := range tests {
		got, err := parseVmRSS(tt.status)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("parseVmRSS(%q) = %d, %v; want %d, ok %v", tt.status, got, err, tt.want, tt.ok)
		}
	}
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	var evs []event
	for i := range 100 {
		evs = append(evs, event{sched: time.Duration(i) * ms, lat: time.Duration(i+1) * ms, status: 200})
	}
	evs[10].status, evs[11].status, evs[12].status = 429, 503, 0
	evs[20].degraded = true
	s := summarize(evs)
	if s.n != 100 || s.ok != 97 || s.denied != 1 || s.errors != 2 || s.degraded != 1 {
		t.Errorf("counts %+v; want 100 answers, 97 allowed, 1 denied, 2 errors (a 503, a transport error), 1 degraded", s)
	}
	if s.p50 != 50*ms || s.p99 != 99*ms || s.max != 100*ms {
		t.Errorf("p50 %v, p99 %v, max %v; want 50ms, 99ms, 100ms", s.p50, s.p99, s.max)
	}
}

func TestRecovery(t *testing.T) {
	ms := time.Millisecond
	evs := []event{
		{sched: 90 * ms, lat: 50 * ms, status: 200, degraded: true},  // due before the end: not counted
		{sched: 100 * ms, lat: 5 * ms, status: 200, degraded: true},  // degraded, answered 5ms after
		{sched: 101 * ms, lat: 1 * ms, status: 0},                    // a transport error: not a decision
		{sched: 102 * ms, lat: 8 * ms, status: 429},                  // the first not degraded, answered 10ms after
		{sched: 103 * ms, lat: 20 * ms, status: 200, degraded: true}, // the last degraded, answered 23ms after
		{sched: 199 * ms, lat: 2 * ms, status: 200, degraded: true},  // answered after the next fault began: not counted
		{sched: 300 * ms, lat: 1 * ms, status: 200, degraded: true},  // due after the next fault: not counted
	}
	first, ok, last := recovery(evs, 100*ms, 200*ms)
	if !ok || first != 10*ms || last != 23*ms {
		t.Errorf("recovery = %v, %v, %v; want 10ms, true, 23ms", first, ok, last)
	}
	if _, ok, _ := recovery(evs[:2], 100*ms, 200*ms); ok {
		t.Error("recovery found a decision not degraded among degraded ones only")
	}
}
