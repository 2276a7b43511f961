package lease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/lease"
	"github.com/sluice-go/sluice/store/memory"
)

// A replica leasing blocks of 5 of a hot key's 100 per minute: one store
// call per 5 decisions, and Remaining counting down what the lease has
// left. In production the backing store is the Redis store every replica
// shares (store/redis), and the fleet admits at most 5 × replicas beyond
// what the store itself would in any period, none beyond the limit in any
// window of fixed_window.
func Example() {
	backing := memory.New() // redis.Open("redis://...") in production
	leased, err := lease.New(backing, lease.Block(5))
	if err != nil {
		log.Fatal(err)
	}
	clock := func() time.Time { return time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC) }
	lim := sluice.New(leased, sluice.WithClock(clock))
	hot := sluice.PerMinute(100).Using(sluice.FixedWindow)
	ctx := context.Background()

	for i := range 7 {
		res, err := lim.Allow(ctx, "tenant-42", hot)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("request %d: allowed %v, remaining %d, reset after %s\n", i+1, res.Allowed, res.Remaining, res.ResetAfter)
	}
	// The backing store counts both blocks as spent.
	peek, err := backing.Take(ctx, sluice.Request{Parts: []sluice.Part{{Key: "tenant-42", Limits: []sluice.Limit{hot}}}, Now: clock()})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("backing store remaining:", peek[0].Remaining)
	// Output:
	// request 1: allowed true, remaining 4, reset after 30s
	// request 2: allowed true, remaining 3, reset after 30s
	// request 3: allowed true, remaining 2, reset after 30s
	// request 4: allowed true, remaining 1, reset after 30s
	// request 5: allowed true, remaining 0, reset after 30s
	// request 6: allowed true, remaining 4, reset after 30s
	// request 7: allowed true, remaining 3, reset after 30s
	// backing store remaining: 90
}

// A reservation answered from a lease settles in it: what the work did
// not use goes back into the lease, with no store call, for the replica's
// next requests. Release, as the process stops, gives the lease's unspent
// units back to the store, for the other replicas.
func Example_settle() {
	backing := memory.New() // redis.Open("redis://...") in production
	leased, err := lease.New(backing, lease.Block(10))
	if err != nil {
		log.Fatal(err)
	}
	clock := func() time.Time { return time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC) }
	lim := sluice.New(leased, sluice.WithClock(clock))
	hot := sluice.PerMinute(100).Using(sluice.FixedWindow)
	ctx := context.Background()
	stored := func() int {
		rs, err := backing.Peek(ctx, sluice.Request{Parts: []sluice.Part{{Key: "tenant-42", Limits: []sluice.Limit{hot}}}, Now: clock()})
		if err != nil {
			log.Fatal(err)
		}
		return rs[0].Remaining
	}

	r, err := lim.Reserve(ctx, "tenant-42", hot, 8)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reserved 8: remaining", r.Remaining)
	after, err := r.Settle(ctx, 3) // the work cost 3
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("settled at 3: remaining", after.Remaining)
	fmt.Println("backing store remaining:", stored())
	if err := leased.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Release, backing store remaining:", stored())
	// Output:
	// reserved 8: remaining 2
	// settled at 3: remaining 7
	// backing store remaining: 90
	// after Release, backing store remaining: 97
}
