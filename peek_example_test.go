package sluice_test

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// Peek tells what the next request would get, spending nothing; a check
// of cost 0 would only say that a request of cost 0 passes.
func ExampleLimiter_Peek() {
	lim := sluice.New(memory.New())
	ctx := context.Background()
	l := sluice.PerMinute(2).Using(sluice.FixedWindow)
	for range 2 {
		if _, err := lim.Allow(ctx, "user:42", l); err != nil {
			fmt.Println(err)
			return
		}
	}
	next, err := lim.Peek(ctx, sluice.Part{Key: "user:42", Limits: []sluice.Limit{l}, Cost: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	look, _ := lim.AllowN(ctx, "user:42", l, 0)
	fmt.Println("the next request would pass:", next.Allowed, "remaining:", next.Remaining)
	fmt.Println("a request of cost 0 passes:", look.Allowed)
	// Output:
	// the next request would pass: false remaining: 0
	// a request of cost 0 passes: true
}
