package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

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

// A store through Sentinel whose admitted decisions are on the replica
// before they are answered, so that a failover loses none of them; a
// decision the replica does not acknowledge within 50ms is answered by the
// error policy, here denied, and reported to the error handler.
func ExampleWithWaitReplicas() {
	store, err := redis.Open("redis://10.0.0.1:26379?addr=10.0.0.2:26379&master_set=mymaster",
		redis.WithWaitReplicas(1, 50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim := sluice.New(store,
		sluice.WithErrorPolicy(sluice.DenyOnError),
		sluice.WithStoreTimeout(100*time.Millisecond),
		sluice.WithHooks(sluice.Hooks{StoreError: func(_ context.Context, err error) {
			if errors.Is(err, redis.ErrNotReplicated) {
				log.Print("consumed on the primary, not on the replica: denied")
			}
		}}))

	res, err := lim.Allow(context.Background(), "api-key-123", sluice.PerMinute(100))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Allowed, res.Degraded)
}
