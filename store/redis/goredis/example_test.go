package goredis_test

import (
	"context"
	"fmt"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/redis/goredis"
)

// An application that already has a go-redis client hands it in.
func Example() {
	rdb := goredislib.NewClient(&goredislib.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	lim := sluice.New(goredis.New(rdb))
	res, err := lim.Allow(context.Background(), "user:42", sluice.PerSecond(10).WithBurst(20))
	fmt.Println(res.Allowed, err)
}
