//go:build integration

package goredis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// TestShards: a ClusterClient's Shards reads every master with its slots
// and node ID, and CLUSTER SLOTS, read on a server without CLUSTER SHARDS,
// gives the same shards.
func TestShards(t *testing.T) {
	c := redistest.StartCluster(t)
	gc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs})
	defer gc.Close()
	ctx := context.Background()
	shards, err := client{s: gc}.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Through clusterCmds, as Shards asks it of a server before 7.0
	// (go-redis deprecates it for newer ones).
	slots, err := slotsShards(clusterCmds(gc).ClusterSlots(ctx).Result())
	if err != nil {
		t.Fatal(err)
	}
	a, b := describe(shards), describe(slots)
	if !maps.Equal(a, b) || len(a) != len(c.Addrs) {
		t.Errorf("CLUSTER SHARDS gives %v, CLUSTER SLOTS %v; want the same %d masters", a, b, len(c.Addrs))
	}
	for _, addr := range c.Addrs {
		if _, ok := a[addr]; !ok {
			t.Errorf("no shard of master %s in %v", addr, a)
		}
	}
}

// describe gives each shard's slot ranges and IDs by master.
func describe(shards []redis.Shard) map[string]string {
	m := map[string]string{}
	for _, s := range shards {
		slots := slices.Clone(s.Slots)
		slices.SortFunc(slots, func(a, b [2]int) int { return a[0] - b[0] })
		ids := slices.Clone(s.IDs)
		slices.Sort(ids)
		m[s.Master] = fmt.Sprint(slots, ids)
	}
	return m
}
