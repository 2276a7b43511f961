// Command basic shows sluice deciding requests on the in-memory store: a
// client spends its burst, is denied with an exact Retry-After, waits
// exactly that long and is admitted again; then two limits are checked in
// one call.
//
//	go run ./examples/basic
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

func main() {
	ctx := context.Background()
	lim := sluice.New(memory.New())

	api := sluice.PerSecond(5).WithBurst(5) // token bucket: 5 per second, 5 at once
	fmt.Printf("limit: %s, in-memory store\n", api)
	for i := 1; i <= 7; i++ {
		res, err := lim.Allow(ctx, "client-1", api)
		if err != nil {
			log.Fatal(err)
		}
		if res.Allowed {
			fmt.Printf("request %d: allowed, %d remaining\n", i, res.Remaining)
			continue
		}
		fmt.Printf("request %d: denied, retry after %v; waiting that long\n", i, res.RetryAfter.Round(time.Millisecond))
		time.Sleep(res.RetryAfter)
	}

	// Login: 3 per minute AND 10 per hour, all or nothing.
	perMinute := sluice.PerMinute(3).Using(sluice.SlidingWindow)
	perHour := sluice.PerHour(10).Using(sluice.FixedWindow)
	fmt.Printf("\nlimits: %s AND %s\n", perMinute, perHour)
	for i := 1; i <= 4; i++ {
		res, err := lim.AllowAll(ctx, "203.0.113.7", 1, perMinute, perHour)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("login %d: allowed=%v, per minute %d left, per hour %d left",
			i, res.Allowed, res.Results[0].Remaining, res.Results[1].Remaining)
		if !res.Allowed {
			fmt.Printf(", retry after %v", res.RetryAfter.Round(time.Second))
		}
		fmt.Println()
	}
}
