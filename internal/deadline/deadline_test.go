package deadline

import (
	"context"
	"errors"
	"testing"
	"time"
)

// lateBy makes c's timer due late ago, as if it fired that late, and
// fires it.
func lateBy(c *timeoutCtx, late time.Duration) {
	c.due.Store(time.Now().Add(-late).UnixNano())
	c.fire()
}

// TestFire: a timer that fires on time ends the context with
// context.DeadlineExceeded; one that fires late moves the deadline, by at
// least PollGap, at most MaxMoves times.
func TestFire(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lates []time.Duration // how late each firing is
		done  bool            // done after the last
		wait  time.Duration   // else the least wait to the next firing
	}{
		{"on time", []time.Duration{0}, true, 0},
		{"just under MinLate", []time.Duration{MinLate - 100*time.Microsecond}, true, 0},
		{"late by 50ms: moves by 50ms", []time.Duration{50 * time.Millisecond}, false, 50 * time.Millisecond},
		{"late by 2ms: moves by PollGap", []time.Duration{2 * time.Millisecond}, false, PollGap},
		{"late, then on time", []time.Duration{50 * time.Millisecond, 0}, true, 0},
		{"late MaxMoves times", []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}, false, 20 * time.Millisecond},
		{"late once more than MaxMoves", []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := WithTimeout(context.Background(), time.Hour)
			defer cancel()
			c := ctx.(*timeoutCtx)
			first, _ := ctx.Deadline()
			var before time.Time
			for _, late := range tc.lates {
				before = time.Now()
				lateBy(c, late)
			}
			select {
			case <-ctx.Done():
				if !tc.done {
					t.Fatalf("done after firings late by %v, want the deadline moved", tc.lates)
				}
				if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
					t.Errorf("Err() = %v, want context.DeadlineExceeded", ctx.Err())
				}
			default:
				if tc.done {
					t.Fatalf("not done after firings late by %v", tc.lates)
				}
				if ctx.Err() != nil {
					t.Errorf("Err() = %v before the context is done", ctx.Err())
				}
				if due := time.Unix(0, c.due.Load()); due.Before(before.Add(tc.wait)) {
					t.Errorf("next firing due %v after the last, want at least %v", due.Sub(before), tc.wait)
				}
			}
			if d, _ := ctx.Deadline(); !d.Equal(first) {
				t.Errorf("Deadline() moved from %v to %v; it reports the first deadline", first, d)
			}
		})
	}
}

// TestWithTimeout: the context ends at its timeout with
// context.DeadlineExceeded, children made from it with it; canceled by
// cancel or its parent, its Err is context.Canceled; Deadline is the
// timeout's, or the parent's if earlier.
func TestWithTimeout(t *testing.T) {
	start := time.Now()
	ctx, cancel := WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	child, stop := context.WithCancel(ctx)
	defer stop()
	<-child.Done()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Since(start) < 20*time.Millisecond {
		t.Errorf("after %v: Err() = %v, want context.DeadlineExceeded at 20ms or later", time.Since(start), ctx.Err())
	}
	if d, ok := ctx.Deadline(); !ok || d.Sub(start) < 20*time.Millisecond || d.Sub(start) > time.Second {
		t.Errorf("Deadline() = %v, %v; want about 20ms after the start", d.Sub(start), ok)
	}

	ctx, cancel = WithTimeout(context.Background(), time.Hour)
	cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("canceled: Err() = %v, want context.Canceled", ctx.Err())
	}

	parent, cancelParent := context.WithTimeout(context.Background(), time.Minute)
	ctx, cancel = WithTimeout(parent, time.Hour)
	defer cancel()
	if pd, _ := parent.Deadline(); func() bool { d, _ := ctx.Deadline(); return !d.Equal(pd) }() {
		t.Errorf("Deadline() is not the parent's earlier one")
	}
	cancelParent()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("parent canceled: Err() = %v, want context.Canceled", ctx.Err())
	}
	c := ctx.(*timeoutCtx)
	c.fire() // the timer, firing after the parent ended, does not make it a timeout
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("parent canceled, then the timer: Err() = %v, want context.Canceled", ctx.Err())
	}
}
