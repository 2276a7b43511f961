package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// fixed is a clock stopped at a round instant, so that the examples print
// the same numbers on every run.
func fixed() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }

func Example() {
	// memory.New() keeps state in this process; use the Redis store
	// (store/redis) when several replicas share the limit.
	lim := sluice.New(memory.New(), sluice.WithClock(fixed))
	ctx := context.Background()
	login := sluice.PerMinute(3).Using(sluice.SlidingWindow)

	for i := range 4 {
		res, err := lim.Allow(ctx, "203.0.113.7", login)
		if err != nil {
			panic(err)
		}
		if !res.Allowed {
			fmt.Printf("request %d: denied, retry after %v\n", i+1, res.RetryAfter)
			continue
		}
		fmt.Printf("request %d: allowed, %d remaining\n", i+1, res.Remaining)
	}
	// Output:
	// request 1: allowed, 2 remaining
	// request 2: allowed, 1 remaining
	// request 3: allowed, 0 remaining
	// request 4: denied, retry after 1m20s
}

func ExampleLimiter_AllowN() {
	lim := sluice.New(memory.New(), sluice.WithClock(fixed))
	// 10 tokens per second, up to 20 at once; a batch of 15 costs 15.
	api := sluice.PerSecond(10).WithBurst(20)
	for _, cost := range []int{15, 15} {
		res, _ := lim.AllowN(context.Background(), "tenant-a", api, cost)
		fmt.Printf("cost %d: allowed=%v remaining=%d retry after %v\n", cost, res.Allowed, res.Remaining, res.RetryAfter)
	}
	// Output:
	// cost 15: allowed=true remaining=5 retry after 0s
	// cost 15: allowed=false remaining=5 retry after 1s
}

func ExampleLimiter_AllowAll() {
	lim := sluice.New(memory.New(), sluice.WithClock(fixed))
	perSecond := sluice.PerSecond(2).Using(sluice.FixedWindow)
	perHour := sluice.PerHour(100).Using(sluice.SlidingLog)
	for range 3 {
		res, _ := lim.AllowAll(context.Background(), "user:42", 1, perSecond, perHour)
		fmt.Printf("allowed=%v binding=%s retry after %v; hourly remaining %d\n",
			res.Allowed, []string{"per second", "per hour"}[res.Binding], res.RetryAfter, res.Results[1].Remaining)
	}
	// Output:
	// allowed=true binding=per second retry after 0s; hourly remaining 99
	// allowed=true binding=per second retry after 0s; hourly remaining 98
	// allowed=false binding=per second retry after 1s; hourly remaining 98
}

// A request limited by two rules while the store is down: each part is
// answered by its own error policy, and the strictest decides.
func ExamplePart_onError() {
	lim := sluice.New(downStore{}, sluice.WithErrorPolicy(sluice.AllowOnError))
	res, _ := lim.AllowParts(context.Background(),
		sluice.Part{Key: "ip:192.0.2.1", Limits: []sluice.Limit{sluice.PerMinute(100)}, Cost: 1},
		sluice.Part{Key: "login:alice", Limits: []sluice.Limit{sluice.PerMinute(5)}, Cost: 1, OnError: sluice.DenyOnError})
	for _, r := range res.Results {
		fmt.Println(r.Allowed, r.Degraded)
	}
	fmt.Println("admitted:", res.Allowed)
	// Output:
	// true allow
	// false deny
	// admitted: false
}

// countedStore counts the decisions that reach the store, for
// ExampleWithDenyCache.
type countedStore struct {
	sluice.Store
	n int
}

func (s *countedStore) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	s.n++
	return s.Store.Take(ctx, req)
}

func ExampleWithDenyCache() {
	store := &countedStore{Store: memory.New()}
	lim := sluice.New(store, sluice.WithClock(fixed), sluice.WithDenyCache(0))
	ctx := context.Background()
	limit := sluice.PerMinute(2)
	for range 100 { // a client hammering its key
		lim.Allow(ctx, "203.0.113.7", limit)
	}
	r, _ := lim.Allow(ctx, "203.0.113.7", limit)
	fmt.Println(r.Allowed, r.RetryAfter, "- the store decided", store.n, "of 101")
	// Output: false 30s - the store decided 3 of 101
}

// loggedStore wraps a store and counts the decisions it is asked for.
// Embedding sluice.Store keeps only Take and Reset: a wrapper around a
// store that is a sluice.OneTaker forwards TakeOne too, so that Allow
// keeps the store's allocation-free path.
type loggedStore struct {
	*memory.Store
	takes, ones int
}

func (s *loggedStore) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	s.takes++
	return s.Store.Take(ctx, req)
}

func (s *loggedStore) TakeOne(ctx context.Context, key string, limit sluice.Limit, cost int, now time.Time) (sluice.Result, error) {
	s.ones++
	return s.Store.TakeOne(ctx, key, limit, cost, now)
}

func ExampleOneTaker() {
	store := &loggedStore{Store: memory.New()}
	lim := sluice.New(store, sluice.WithClock(fixed))
	ctx := context.Background()
	limit := sluice.PerMinute(10)
	lim.Allow(ctx, "alice", limit)         // TakeOne
	lim.AllowN(ctx, "alice", limit, 3)     // TakeOne
	lim.AllowAll(ctx, "alice", 1, limit)   // Take: a MultiResult
	r, _ := lim.Allow(ctx, "alice", limit) // TakeOne
	fmt.Println(r.Remaining, "remaining;", store.ones, "TakeOne,", store.takes, "Take")
	// Output: 4 remaining; 3 TakeOne, 1 Take
}

// A token budget: each LLM call reserves the most it may spend, and is
// settled at what it spent once the answer is in.
func ExampleLimiter_Reserve() {
	lim := sluice.New(memory.New(), sluice.WithClock(fixed))
	ctx := context.Background()
	budget := sluice.PerMinute(10_000).Using(sluice.FixedWindow)

	for _, used := range []int{1200, 5000} {
		r, err := lim.Reserve(ctx, "api-key-1", budget, 4096)
		if err != nil {
			panic(err)
		}
		if !r.Allowed {
			fmt.Println("denied, retry after", r.RetryAfter)
			continue
		}
		// ... the call runs, and reports the tokens it used ...
		after, err := r.Settle(ctx, used)
		if err != nil {
			panic(err)
		}
		fmt.Printf("used %d: %d tokens left\n", used, after.Remaining)
	}
	r, _ := lim.Reserve(ctx, "api-key-1", budget, 4096)
	fmt.Println("a third call reserving 4096 is allowed:", r.Allowed)
	// Output:
	// used 1200: 8800 tokens left
	// used 5000: 3800 tokens left
	// a third call reserving 4096 is allowed: false
}
