package policy_test

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// An operator looks at a client's state under a rule without spending
// anything, sees that its next request of cost 2 would be denied, and
// resets the client.
func ExampleEngine_Inspect() {
	set, err := policy.Compile([]policy.Rule{{
		Name:   "export",
		Key:    policy.Key{Source: policy.KeyHeader, Name: "X-API-Key"},
		Limits: []sluice.Limit{sluice.PerHour(5).Using(sluice.FixedWindow), sluice.PerMinute(3).Using(sluice.SlidingLog)},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	e := policy.New(sluice.New(memory.New()), set)
	ctx := context.Background()
	for range 2 {
		if _, err := e.Check(ctx, policy.Check{Rule: "export", Key: "tenant-7"}); err != nil {
			fmt.Println(err)
			return
		}
	}

	two := 2
	in, err := e.Inspect(ctx, policy.Check{Rule: "export", Key: "tenant-7", Cost: &two})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("a request of cost %d would pass: %v\n", in.Cost, in.Allowed)
	for _, l := range in.Limits {
		fmt.Printf("  %s (%s, %d per %s): allowed %v, %d remaining\n", l.Limit.Name, l.Limit.Algorithm, l.Limit.Limit, l.Limit.Period, l.Result.Allowed, l.Result.Remaining)
	}

	if _, err := e.Reset(ctx, policy.Check{Rule: "export", Key: "tenant-7"}); err != nil {
		fmt.Println(err)
		return
	}
	in, _ = e.Inspect(ctx, policy.Check{Rule: "export", Key: "tenant-7", Cost: &two})
	fmt.Printf("after the reset: %v, %d remaining after it\n", in.Allowed, in.Result().Remaining)
	// Output:
	// a request of cost 2 would pass: false
	//   export-1h (fixed_window, 5 per 1h0m0s): allowed true, 3 remaining
	//   export-1m (sliding_log, 3 per 1m0s): allowed false, 1 remaining
	// after the reset: true, 1 remaining after it
}
