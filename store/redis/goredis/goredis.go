// Package goredis lets an application hand its existing
// github.com/redis/go-redis/v9 client to the sluice Redis store:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store := goredis.New(rdb)
//	lim := sluice.New(store)
//
// Any go-redis client works: Client, ClusterClient, Ring, the failover
// (Sentinel) client, or a UniversalClient.
package goredis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	sluiceredis "github.com/sluice-go/sluice/store/redis"
)

// New returns a Redis store that runs its scripts through c. The caller
// keeps owning c and closes it. Over a ClusterClient the store splits
// decisions by slot (sluiceredis.WithCluster), over a Ring by client key
// (sluiceredis.WithSharding), so that each key is decided where it lives.
func New(c goredis.Scripter, opts ...sluiceredis.Option) *sluiceredis.Store {
	switch c.(type) {
	case *goredis.ClusterClient:
		opts = append([]sluiceredis.Option{sluiceredis.WithCluster()}, opts...)
	case *goredis.Ring:
		opts = append([]sluiceredis.Option{sluiceredis.WithSharding()}, opts...)
	}
	return sluiceredis.New(client{c}, opts...)
}

// client adapts a go-redis client (any of its client types) to
// sluiceredis.Client.
type client struct{ s goredis.Scripter }

// EvalSha implements sluiceredis.Client.
func (c client) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return c.ints(c.s.EvalSha(ctx, sha, keys, anys(args)...))
}

// Eval implements sluiceredis.Client.
func (c client) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	return c.ints(c.s.Eval(ctx, script, keys, anys(args)...))
}

// ints returns the reply, wrapping the errors the store acts on. A
// ClusterClient returns TRYAGAIN, ASK or MOVED when a slot migration
// outlasts its MaxRedirects attempts; the store sends such a script
// again. MOVED from any other client means it is not a cluster client,
// which retrying would not mend.
func (c client) ints(cmd *goredis.Cmd) ([]int64, error) {
	v, err := cmd.Int64Slice()
	if err == nil {
		return v, nil
	}
	_, cluster := c.s.(*goredis.ClusterClient)
	_, ask := goredis.IsAskError(err)
	_, moved := goredis.IsMovedError(err)
	switch {
	case goredis.HasErrorPrefix(err, "NOSCRIPT"):
		return nil, fmt.Errorf("%w: %w", sluiceredis.ErrNoScript, err)
	case goredis.IsTryAgainError(err), ask, moved && cluster:
		return nil, fmt.Errorf("%w: %w", sluiceredis.ErrTryAgain, err)
	}
	return v, err
}

func anys(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// clusterCmds are the commands of a go-redis client that Shards sends:
// a ClusterClient's (any client has them; the Store asks a Cluster's
// only).
type clusterCmds interface {
	ClusterShards(ctx context.Context) *goredis.ClusterShardsCmd
	ClusterSlots(ctx context.Context) *goredis.ClusterSlotsCmd
}

// Shards implements sluiceredis.ShardLister: CLUSTER SHARDS, or CLUSTER
// SLOTS on a server before Redis 7.0, which lacks it.
func (c client) Shards(ctx context.Context) ([]sluiceredis.Shard, error) {
	cc, ok := c.s.(clusterCmds)
	if !ok {
		return nil, fmt.Errorf("a %T cannot read a Cluster's shards", c.s)
	}
	v, err := cc.ClusterShards(ctx).Result()
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown subcommand") {
		return slotsShards(cc.ClusterSlots(ctx).Result())
	}
	if err != nil {
		return nil, err
	}
	shards := make([]sluiceredis.Shard, 0, len(v))
	for _, s := range v {
		var sh sluiceredis.Shard
		for _, r := range s.Slots {
			sh.Slots = append(sh.Slots, [2]int{int(r.Start), int(r.End)})
		}
		for _, n := range s.Nodes {
			sh.IDs = append(sh.IDs, n.ID)
			if n.Role == "master" {
				host := n.Endpoint
				if host == "" || host == "?" {
					host = n.IP
				}
				sh.Master = net.JoinHostPort(host, strconv.FormatInt(n.Port, 10))
			}
		}
		shards = append(shards, sh)
	}
	return shards, nil
}

// slotsShards returns the shards of a reply to CLUSTER SLOTS, whose
// entries are ranges of slots, each with its master first.
func slotsShards(v []goredis.ClusterSlot, err error) ([]sluiceredis.Shard, error) {
	if err != nil {
		return nil, err
	}
	byMaster := map[string]int{}
	var shards []sluiceredis.Shard
	for _, e := range v {
		if len(e.Nodes) == 0 {
			continue
		}
		k, ok := byMaster[e.Nodes[0].Addr]
		if !ok {
			k = len(shards)
			byMaster[e.Nodes[0].Addr] = k
			sh := sluiceredis.Shard{Master: e.Nodes[0].Addr}
			for _, n := range e.Nodes {
				sh.IDs = append(sh.IDs, n.ID)
			}
			shards = append(shards, sh)
		}
		shards[k].Slots = append(shards[k].Slots, [2]int{e.Start, e.End})
	}
	return shards, nil
}
