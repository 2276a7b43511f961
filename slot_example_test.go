package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// A concurrency limit holds a slot per piece of work in flight: Acquire
// takes one or is denied, Release frees it, and KeepAlive renews its lease
// while the work runs, so that the slots of a process that dies free
// themselves within a lease (30s unless the limit's Period says).
func ExampleLimiter_Acquire() {
	lim := sluice.New(memory.New())
	ctx := context.Background()
	exports := sluice.Concurrent(2) // at most 2 exports in flight per account

	a, _ := lim.Acquire(ctx, "acct-42", exports)
	b, _ := lim.Acquire(ctx, "acct-42", exports)
	c, _ := lim.Acquire(ctx, "acct-42", exports)
	fmt.Println(a.Allowed, b.Allowed, c.Allowed, c.RetryAfter.Round(time.Second))

	stop := a.KeepAlive(ctx) // renews a's lease until the work is done
	// ... the export runs ...
	stop()
	if _, err := a.Release(ctx); err != nil {
		panic(err)
	}
	d, _ := lim.Acquire(ctx, "acct-42", exports)
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true true false 30s
	// true 0
}
