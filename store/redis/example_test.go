package redis_test

import (
	"context"
	"fmt"
	"log"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
)

// A limiter shared by every replica, that falls back to per-replica limits
// while Redis is unreachable.
func Example() {
	store, err := redis.Open("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim := sluice.New(store, sluice.WithErrorPolicy(sluice.LocalOnError(memory.New())))

	res, err := lim.Allow(context.Background(), "api-key-123", sluice.PerMinute(100))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Allowed, res.Remaining)
}

// Open takes a Cluster's nodes or Sentinels in the URL.
func ExampleOpen() {
	// A Cluster: any node is enough, more are seeds.
	cluster, err := redis.Open("redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000")
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	// Through Sentinel: the sentinels' addresses and the master set's name.
	sentinel, err := redis.Open("redis://10.0.0.1:26379?addr=10.0.0.2:26379&master_set=mymaster")
	if err != nil {
		log.Fatal(err)
	}
	defer sentinel.Close()
}
