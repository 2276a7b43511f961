// Package goredis lets an application hand its existing
// github.com/redis/go-redis/v9 client to the sluice Redis store:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store := goredis.New(rdb)
//	lim := sluice.New(store)
//
// Any go-redis client works: Client, ClusterClient, Ring, the failover
// (Sentinel) client, or a UniversalClient. sluiceredis.WithWaitReplicas
// works over a Client and the failover client (a pipeline sends a
// decision's script and its WAIT on one connection), not over a
// ClusterClient or a Ring, where New panics with it.
package goredis

import (
	"context"
	"fmt"
	"time"

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
	if p, ok := c.(pipeliner); ok {
		return sluiceredis.New(waitClient{client{c}, p}, opts...)
	}
	return sluiceredis.New(client{c}, opts...)
}

// pipeliner is a go-redis client that pipelines: every client type but a
// bare Scripter.
type pipeliner interface {
	Pipeline() goredis.Pipeliner
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

// waitClient is a client that can pipeline, which implements
// sluiceredis.Waiter too.
type waitClient struct {
	client
	p pipeliner
}

// EvalShaWait implements sluiceredis.Waiter: EVALSHA and WAIT in one
// pipeline, which go-redis writes and reads on one connection, in order.
func (c waitClient) EvalShaWait(ctx context.Context, sha string, keys, args []string, replicas int, timeout time.Duration) ([]int64, int64, error) {
	pipe := c.p.Pipeline()
	cmd := pipe.EvalSha(ctx, sha, keys, anys(args)...)
	return c.wait(ctx, pipe, cmd, replicas, timeout)
}

// EvalWait implements sluiceredis.Waiter.
func (c waitClient) EvalWait(ctx context.Context, script string, keys, args []string, replicas int, timeout time.Duration) ([]int64, int64, error) {
	pipe := c.p.Pipeline()
	cmd := pipe.Eval(ctx, script, keys, anys(args)...)
	return c.wait(ctx, pipe, cmd, replicas, timeout)
}

// wait adds WAIT to pipe after the script cmd, runs the pipeline and
// returns the script's reply and WAIT's.
func (c waitClient) wait(ctx context.Context, pipe goredis.Pipeliner, cmd *goredis.Cmd, replicas int, timeout time.Duration) ([]int64, int64, error) {
	w := goredis.NewIntCmd(ctx, "wait", replicas, timeout.Milliseconds())
	_ = pipe.Process(ctx, w)
	_, _ = pipe.Exec(ctx) // each command's error is its own
	v, err := c.ints(cmd)
	if err != nil {
		return nil, 0, err
	}
	acked, err := w.Result()
	if err != nil {
		return nil, 0, fmt.Errorf("WAIT: %w", err)
	}
	return v, acked, nil
}
