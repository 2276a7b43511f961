package memory_test

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

func Example() {
	store := memory.New()
	lim := sluice.New(store)
	res, _ := lim.Allow(context.Background(), "user:42", sluice.PerMinute(10).Using(sluice.GCRA))
	fmt.Println(res.Allowed, res.Remaining, store.Len())
	// Output: true 9 1
}
