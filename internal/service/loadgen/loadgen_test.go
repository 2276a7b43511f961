package loadgen

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunCounts: a run of a count sends exactly it, keys in turn, and
// sorts allowed, denied and failed answers.
func TestRunCounts(t *testing.T) {
	var perKey [7]atomic.Int64
	boom := errors.New("boom")
	r := Run(context.Background(), Options{Concurrency: 5, Requests: 700, Keys: 7}, func(_ context.Context, n int) (bool, error) {
		perKey[n].Add(1)
		switch n {
		case 0:
			return false, boom
		case 1, 2:
			return false, nil
		}
		return true, nil
	})
	if r.Sent != 700 || r.Errors != 100 || r.Denied != 200 || r.Allowed != 400 || !errors.Is(r.FirstErr, boom) || len(r.Latencies) != 700 {
		t.Errorf("run: %+v (%d latencies), want 700 sent, 100 errors (boom), 200 denied, 400 allowed", r, len(r.Latencies))
	}
	for n := range perKey {
		if got := perKey[n].Load(); got != 100 {
			t.Errorf("key %d: %d requests, want 100", n, got)
		}
	}
	if r.PerSecond() <= 0 || r.Quantile(0) > r.Quantile(1) {
		t.Errorf("per second %v, quantiles %v..%v", r.PerSecond(), r.Quantile(0), r.Quantile(1))
	}
}

// TestRunDuration: a run for a duration ends, and counts every request
// it sent as answered.
func TestRunDuration(t *testing.T) {
	r := Run(context.Background(), Options{Concurrency: 3, Duration: 50 * time.Millisecond, Keys: 10}, func(context.Context, int) (bool, error) {
		time.Sleep(time.Millisecond)
		return true, nil
	})
	if r.Sent == 0 || r.Sent != r.Allowed || r.Elapsed < 50*time.Millisecond {
		t.Errorf("run for 50ms: %+v", r)
	}
}

// TestRunPacedLatency: under a rate, latency is measured from when a
// request was due, not from when it was sent: a stall of the service
// delays the requests queued behind it, and they count the wait (no
// coordinated omission).
func TestRunPacedLatency(t *testing.T) {
	var calls atomic.Int64
	r := Run(context.Background(), Options{Concurrency: 1, Requests: 20, Keys: 1, Rate: 200}, func(context.Context, int) (bool, error) {
		if calls.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond) // the service stalls once
		}
		return true, nil
	})
	// Requests 1..19 were due at 5ms..95ms and could leave only after
	// 100ms: over half of them waited at least 50ms behind the stall.
	if p50 := r.Quantile(0.5); p50 < 40*time.Millisecond {
		t.Errorf("paced run behind a 100ms stall: p50 %s, p99 %s; the time queued behind the stall is not counted", p50, r.Quantile(0.99))
	}
}

// TestTemplate: {n} and {ip} expand, anywhere and repeatedly; other
// braces are kept.
func TestTemplate(t *testing.T) {
	for _, tc := range []struct {
		tmpl string
		n    int
		want string
		ip   bool
	}{
		{"plain", 5, "plain", false},
		{"{n}", 42, "42", false},
		{"{ip}", 0x010203, "10.1.2.3", true},
		{"user-{n}@{ip}/{n}", 258, "user-258@10.0.1.2/258", true},
		{"{x}{n", 1, "{x}{n", false},
	} {
		tp := ParseTemplate(tc.tmpl)
		if got := tp.Expand(tc.n); got != tc.want || tp.HasIP() != tc.ip {
			t.Errorf("%q expanded for %d = %q (ip %v), want %q (ip %v)", tc.tmpl, tc.n, got, tp.HasIP(), tc.want, tc.ip)
		}
	}
}
