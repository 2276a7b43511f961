// Package goredis lets an application hand its existing
// github.com/redis/go-redis/v9 client to the sluice Redis store:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store := goredis.New(rdb)
//	lim := sluice.New(store)
//
// Any go-redis client works: Client, ClusterClient, Ring, the failover
// (Sentinel) client, or a UniversalClient. redis.WithWaitReplicas
// works over a Client and the failover client (a pipeline sends a
// decision's script and its WAIT on one connection), not over a
// ClusterClient or a Ring, where New panics with it.
//
// # Retries
//
// go-redis sends a command again when its connection fails before the
// reply arrives (io.EOF, an unexpected EOF, its own read timeout), up to
// Options.MaxRetries more times (3 by default), and a ClusterClient or a
// Ring again on top of that. For a decision that is wrong: the script may
// have run before its reply was lost, and running it again charges the
// request twice, answering with the second charge (or failing, charged
// all the same). The store's scripts therefore go to go-redis as commands
// that refuse those retries (go-redis's Cmder.NoRetry, which every client
// type honors, pipelines too), whatever the client's MaxRetries: a
// decision whose reply is lost fails, once, and the Limiter's error
// policy answers it. Nothing needs configuring, and the client's other
// commands keep their retries. go-redis still sends a script again where
// it did not run: a connection it closed before writing to it, and MOVED,
// ASK and READONLY on a ClusterClient; a failed dial or a pool timeout,
// which it would otherwise retry, fails the decision too. (A client that
// is not one of go-redis's, passed as a bare Scripter, runs the scripts
// through its EvalSha and Eval, and must not resend them itself.)
package goredis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/store/redis"
)

// New returns a Redis store that runs its scripts through c. The caller
// keeps owning c and closes it. Over a ClusterClient the store splits
// decisions by slot (redis.WithCluster), over a Ring by client key
// (redis.WithSharding), so that each key is decided where it lives.
func New(c goredis.Scripter, opts ...redis.Option) *redis.Store {
	switch c.(type) {
	case *goredis.ClusterClient:
		opts = append([]redis.Option{redis.WithCluster()}, opts...)
	case *goredis.Ring:
		opts = append([]redis.Option{redis.WithSharding()}, opts...)
	}
	cl := client{s: c}
	cl.p, _ = c.(processor)
	if p, ok := c.(pipeliner); ok {
		return redis.New(waitClient{cl, p}, opts...)
	}
	return redis.New(cl, opts...)
}

// processor is a go-redis client that runs a command it is given: every
// client type but a bare Scripter.
type processor interface {
	Process(ctx context.Context, cmd goredis.Cmder) error
}

// pipeliner is a go-redis client that pipelines: every client type but a
// bare Scripter.
type pipeliner interface {
	Pipeline() goredis.Pipeliner
}

// client adapts a go-redis client (any of its client types) to
// redis.Client.
type client struct {
	s goredis.Scripter
	p processor // s, when it is one: it runs the scripts (see "Retries")
}

// EvalSha implements redis.Client.
func (c client) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	if c.p == nil {
		return c.ints(c.s.EvalSha(ctx, sha, keys, anys(args)...))
	}
	return c.ints(c.run(ctx, "evalsha", sha, keys, args))
}

// Eval implements redis.Client.
func (c client) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	if c.p == nil {
		return c.ints(c.s.Eval(ctx, script, keys, anys(args)...))
	}
	return c.ints(c.run(ctx, "eval", script, keys, args))
}

// run runs name (eval or evalsha) of script over keys and args through
// c.p, as a command go-redis does not send again (once).
func (c client) run(ctx context.Context, name, script string, keys, args []string) *goredis.Cmd {
	cmd := scriptCmd(ctx, name, script, keys, args)
	_ = c.p.Process(ctx, once{cmd})
	return cmd
}

// scriptCmd returns the command name (eval or evalsha) of script over
// keys and args, laid out as go-redis's own Eval lays it out: its first
// key is what a ClusterClient routes by and a Ring shards by.
func scriptCmd(ctx context.Context, name, script string, keys, args []string) *goredis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, script, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	for _, a := range args {
		cmdArgs = append(cmdArgs, a)
	}
	cmd := goredis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// once is a command that go-redis must not send again after a failure
// that may have come after Redis ran it (see "Retries").
type once struct{ *goredis.Cmd }

// NoRetry implements goredis.Cmder.
func (once) NoRetry() bool { return true }

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
		return nil, fmt.Errorf("%w: %w", redis.ErrNoScript, err)
	case goredis.IsTryAgainError(err), ask, moved && cluster:
		return nil, fmt.Errorf("%w: %w", redis.ErrTryAgain, err)
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

// Shards implements redis.ShardLister: CLUSTER SHARDS, or CLUSTER
// SLOTS on a server before Redis 7.0, which lacks it.
func (c client) Shards(ctx context.Context) ([]redis.Shard, error) {
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
	shards := make([]redis.Shard, 0, len(v))
	for _, s := range v {
		var sh redis.Shard
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
func slotsShards(v []goredis.ClusterSlot, err error) ([]redis.Shard, error) {
	if err != nil {
		return nil, err
	}
	byMaster := map[string]int{}
	var shards []redis.Shard
	for _, e := range v {
		if len(e.Nodes) == 0 {
			continue
		}
		k, ok := byMaster[e.Nodes[0].Addr]
		if !ok {
			k = len(shards)
			byMaster[e.Nodes[0].Addr] = k
			sh := redis.Shard{Master: e.Nodes[0].Addr}
			for _, n := range e.Nodes {
				sh.IDs = append(sh.IDs, n.ID)
			}
			shards = append(shards, sh)
		}
		shards[k].Slots = append(shards[k].Slots, [2]int{e.Start, e.End})
	}
	return shards, nil
}

// waitClient is a client that can pipeline, which implements
// redis.Waiter too.
type waitClient struct {
	client
	p pipeliner
}

// EvalShaWait implements redis.Waiter: EVALSHA and WAIT in one
// pipeline, which go-redis writes and reads on one connection, in order.
// A pipeline with a NoRetry command in it is not sent again either.
func (c waitClient) EvalShaWait(ctx context.Context, sha string, keys, args []string, replicas int, timeout time.Duration) ([]int64, int64, error) {
	return c.wait(ctx, scriptCmd(ctx, "evalsha", sha, keys, args), replicas, timeout)
}

// EvalWait implements redis.Waiter.
func (c waitClient) EvalWait(ctx context.Context, script string, keys, args []string, replicas int, timeout time.Duration) ([]int64, int64, error) {
	return c.wait(ctx, scriptCmd(ctx, "eval", script, keys, args), replicas, timeout)
}

// wait runs the script cmd and WAIT in one pipeline and returns the
// script's reply and WAIT's.
func (c waitClient) wait(ctx context.Context, cmd *goredis.Cmd, replicas int, timeout time.Duration) ([]int64, int64, error) {
	pipe := c.p.Pipeline()
	_ = pipe.Process(ctx, once{cmd})
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
