package policyfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/store/lease"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
)

// Backend is a store at work: the Limiter over it, whether it can decide,
// and how to release it.
type Backend struct {
	// Limiter decides with the store, under the section's error policy
	// and timeout.
	Limiter *sluice.Limiter
	// Ready reports whether decisions can be made (see Policy.Ready).
	Ready func(ctx context.Context) error
	// Close releases the store's connections.
	Close func()
}

// OpenBackend builds the Limiter that the redis section r asks for, as
// Open does, with the logger, store wrapper, breaker report and memory
// store report of opts (other options do not apply), and in-memory stores
// of memory.DefaultCapacity. Without a URL it is the in-memory store, said
// once in the log, since its limits hold per process.
func OpenBackend(r config.Redis, opts ...Option) (*Backend, error) {
	st := defaults()
	for _, o := range opts {
		o(&st)
	}
	return openBackend(r, config.Memory{MaxKeys: memory.DefaultCapacity}, st, nil)
}

// sweepEvery is how often an in-memory store drops expired state even
// when no traffic comes, so that a flood's memory returns.
const sweepEvery = time.Minute

// fleetTTL is how long a replica's heartbeat counts it among the replicas
// sharing the limits; it beats three times as often.
const fleetTTL = 3 * time.Second

// openBackend builds the Backend of r and m. blocks, when not nil, is
// the lease block of each limit (lease.BlockFor): the Redis store is then
// behind a lease store, whose rests Close gives back.
func openBackend(r config.Redis, m config.Memory, st settings, blocks func(sluice.Limit) int) (*Backend, error) {
	log := st.log
	// The in-memory store: the store, or Redis's local fallback.
	mem := func(ctx context.Context) *memory.Store {
		s := memory.New(memory.WithCapacity(m.MaxKeys))
		go s.SweepEvery(ctx, sweepEvery)
		st.onMemory(s)
		return s
	}
	if r.URL == "" {
		log.Warn("no Redis configured: using the in-memory store, whose limits hold per process (N replicas admit N x the limit)", "max_keys", m.MaxKeys)
		if r.WaitReplicas > 0 {
			log.Warn("redis.wait_replicas applies to Redis only: the in-memory store has no replicas to wait for", "wait_replicas", r.WaitReplicas)
		}
		if blocks != nil {
			log.Info("lease sections apply to Redis only: the in-memory store decides in process already")
		}
		ctx, cancel := context.WithCancel(context.Background())
		return &Backend{
			Limiter: sluice.New(mem(ctx), sluice.WithHooks(st.hooks)),
			Ready:   func(context.Context) error { return nil },
			Close:   cancel,
		}, nil
	}
	if _, err := sluice.ParseErrorPolicy(r.OnError, nil); err != nil {
		return nil, err
	}
	if err := redis.CheckURL(r.URL); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	policy, _ := sluice.ParseErrorPolicy(r.OnError, mem(ctx))
	store := &lazyRedis{url: r.URL, log: log}
	if r.Batch > 0 {
		store.opts = append(store.opts, redis.WithBatch(r.Batch))
	}
	if r.WaitReplicas > 0 {
		store.opts = append(store.opts, redis.WithWaitReplicas(r.WaitReplicas, r.WaitTimeout))
	}
	store.connect(ctx)
	fleet := &fleet{n: r.Replicas}
	if r.Replicas == 0 {
		fleet.n = 1 // until a heartbeat says otherwise
		go fleet.beat(ctx, store, log)
	}
	down := map[int]time.Time{} // when each node's breaker opened; its handler's calls are never concurrent
	opts := []sluice.Option{sluice.WithErrorPolicy(policy), sluice.WithStoreTimeout(r.Timeout), sluice.WithReplicas(fleet.size)}
	if r.DenyCache {
		opts = append(opts, sluice.WithDenyCache(0))
	}
	hooks := st.hooks
	calls := hooks.StoreCall
	var backing sluice.Store = store
	if blocks != nil && calls != nil {
		// Behind leases the hook times Redis's calls, not the lease's.
		backing, calls = timed{store, calls}, nil
	}
	base, release, err := leased(backing, blocks)
	if err != nil {
		cancel()
		store.Close()
		return nil, err
	}
	lim := sluice.New(base, append(opts,
		sluice.WithHooks(sluice.Hooks{StoreCall: calls, StoreError: hooks.StoreError, Breaker: func(ch sluice.NodeBreaker) {
			// Once per change of a node's state, not per failed decision.
			if ch.State == sluice.BreakerOpen {
				down[ch.Node] = time.Now()
				log.Warn("store failing; the error policy decides until it recovers", "err", ch.Err, "node", nodeAttr(ch.Name), "on_error", policy.String(), "replicas", fleet.size())
			} else {
				log.Info("store recovered", "node", nodeAttr(ch.Name), "after", time.Since(down[ch.Node]).Round(time.Millisecond))
			}
			if hooks.Breaker != nil {
				hooks.Breaker(ch)
			}
		}}))...)
	log.Info("store", "kind", "redis", "on_error", policy.String(), "timeout", r.Timeout, "replicas", replicasSetting(r.Replicas), "wait_replicas", r.WaitReplicas)
	ready := func(context.Context) error { return nil }
	if policy.String() == sluice.DenyOnError.String() {
		// Under deny every decision fails while Redis does: not ready.
		// Redis itself is asked (a decision on a reserved key, within the
		// store timeout), not the breaker, which may stay open while no
		// decision arrives.
		ready = func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, r.Timeout)
			defer cancel()
			return store.Ready(ctx)
		}
	}
	closeAll := func() {
		ctx, stop := context.WithTimeout(context.Background(), r.Timeout)
		if err := release(ctx); err != nil {
			log.Warn("leases not given back: their units stay spent until their windows end", "err", err)
		}
		stop()
		cancel()
		store.Close()
	}
	return &Backend{Limiter: lim, Ready: ready, Close: closeAll}, nil
}

// leased returns s behind a lease store leasing blocks, and what gives
// the leases' rests back; s itself when blocks is nil.
func leased(s sluice.Store, blocks func(sluice.Limit) int) (sluice.Store, func(context.Context) error, error) {
	if blocks == nil {
		return s, func(context.Context) error { return nil }, nil
	}
	l, err := lease.New(s, lease.BlockFor(blocks))
	if err != nil {
		return nil, nil, err
	}
	return l, l.Release, nil
}

// nodeAttr is how the log shows a breaker's node: the Redis master's
// address on a Cluster, "redis" for a server alone or through Sentinel.
func nodeAttr(name string) string {
	if name == "" {
		return "redis"
	}
	return name
}

// replicasSetting is how the log shows redis.replicas.
func replicasSetting(n int) any {
	if n == 0 {
		return "auto"
	}
	return n
}

// fleet is the number of replicas sharing the limits, configured or
// learned from heartbeats in Redis.
type fleet struct {
	n      int // configured, or until the first heartbeat
	learnt atomic.Int64
}

// size returns the number of replicas: the last a heartbeat counted (kept
// while Redis fails), or the configured number.
func (f *fleet) size() int {
	if n := f.learnt.Load(); n > 0 {
		return int(n)
	}
	return f.n
}

// beat sends a heartbeat every fleetTTL/3 until ctx ends, logging each
// change of the count, and when the heartbeat starts failing (an outage,
// or a Redis user that may not run its commands) and works again.
func (f *fleet) beat(ctx context.Context, store *lazyRedis, log *slog.Logger) {
	member := replicaName()
	t := time.NewTicker(fleetTTL / 3)
	defer t.Stop()
	failing := false
	for {
		beatCtx, cancel := context.WithTimeout(ctx, fleetTTL/3)
		n, err := store.Heartbeat(beatCtx, member, fleetTTL)
		cancel()
		if err == nil && int64(n) != f.learnt.Swap(int64(n)) {
			log.Info("replicas sharing the limits", "replicas", n)
		}
		switch {
		case err != nil && !failing && ctx.Err() == nil && !errors.Is(err, errNotConnected):
			failing = true
			log.Warn("replica heartbeat failing; the number of replicas stays as last counted", "err", err, "replicas", f.size())
		case err == nil && failing:
			failing = false
			log.Info("replica heartbeat working again", "replicas", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// replicaName names this process among the replicas: host, pid and a
// random part, so that a restarted process is a new member.
func replicaName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%08x", host, os.Getpid(), rand.Uint32())
}

// errNotConnected is the store error while Redis has not been reached yet.
var errNotConnected = errors.New("redis store: not connected yet")

// lazyRedis is the Redis store once it is reachable: sluice starts (and
// the error policy decides) while Redis is down, and connects as soon as
// it can, logging the change.
type lazyRedis struct {
	url   string
	opts  []redis.Option
	log   *slog.Logger
	store atomic.Pointer[redis.Store]
}

// connect tries to open the store now, and in the background every second
// until it succeeds or ctx ends. A store opened as ctx ends (by Close) is
// closed.
func (l *lazyRedis) connect(ctx context.Context) {
	err := l.try()
	if err == nil {
		return
	}
	if errors.Is(err, redis.ErrWaitUnsupported) {
		// Connecting again would meet the same Cluster.
		l.log.Error("redis refused: the error policy decides every request until the settings change", "err", err)
		return
	}
	l.log.Warn("redis unreachable; the error policy decides until it is reachable", "err", err)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				err := l.try()
				if errors.Is(err, redis.ErrWaitUnsupported) {
					l.log.Error("redis refused: the error policy decides every request until the settings change", "err", err)
					return
				}
				if err == nil {
					if ctx.Err() != nil {
						l.Close() // Close ran while try connected
						return
					}
					l.log.Info("redis reachable: deciding with the shared store")
					return
				}
			}
		}
	}()
}

// try opens the store; its error names the cause (refused, wrong
// password...) but not the URL.
func (l *lazyRedis) try() error {
	s, err := redis.Open(l.url, l.opts...)
	if err != nil {
		return err
	}
	l.store.Store(s)
	return nil
}

// Take decides with the Redis store, or fails with errNotConnected while
// Redis has not been reached yet.
func (l *lazyRedis) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	s := l.store.Load()
	if s == nil {
		return nil, errNotConnected
	}
	return s.Take(ctx, req)
}

// Peek reads req's state in the Redis store (redis.Store.Peek), or fails
// with errNotConnected while Redis has not been reached yet.
func (l *lazyRedis) Peek(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	s := l.store.Load()
	if s == nil {
		return nil, errNotConnected
	}
	return s.Peek(ctx, req)
}

// TakeAt decides with the Redis store, reporting its instants
// (redis.Store.TakeAt), or fails with errNotConnected while Redis has not
// been reached yet; so do Refund and Charge, which settle a reservation,
// and Renew, which extends a slot's lease.
func (l *lazyRedis) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	s := l.store.Load()
	if s == nil {
		return sluice.Taken{}, errNotConnected
	}
	return s.TakeAt(ctx, req)
}

// Refund gives back to the Redis store (redis.Store.Refund).
func (l *lazyRedis) Refund(ctx context.Context, req sluice.Request, t sluice.Taken) ([]sluice.Result, error) {
	s := l.store.Load()
	if s == nil {
		return nil, errNotConnected
	}
	return s.Refund(ctx, req, t)
}

// Charge charges the Redis store (redis.Store.Charge).
func (l *lazyRedis) Charge(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	s := l.store.Load()
	if s == nil {
		return nil, errNotConnected
	}
	return s.Charge(ctx, req)
}

// Renew extends slots' leases in the Redis store (redis.Store.Renew).
func (l *lazyRedis) Renew(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	s := l.store.Load()
	if s == nil {
		return nil, errNotConnected
	}
	return s.Renew(ctx, req)
}

// Reset resets key's limits in the Redis store, or fails with
// errNotConnected while Redis has not been reached yet.
func (l *lazyRedis) Reset(ctx context.Context, key string, limits ...sluice.Limit) error {
	s := l.store.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Reset(ctx, key, limits...)
}

// Ready reports whether Redis runs decisions (redis.Store.Ready: a
// decision on a reserved key, so that an ACL that forbids the scripts'
// writes or a read-only replica shows).
func (l *lazyRedis) Ready(ctx context.Context) error {
	s := l.store.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Ready(ctx)
}

// Heartbeat records a heartbeat of member and returns the number of live
// replicas (redis.Store.Heartbeat), or fails with errNotConnected.
func (l *lazyRedis) Heartbeat(ctx context.Context, member string, ttl time.Duration) (int, error) {
	s := l.store.Load()
	if s == nil {
		return 0, errNotConnected
	}
	return s.Heartbeat(ctx, member, ttl)
}

// Node implements sluice.Noder: the Redis store's node of key (the
// Cluster shard of its slot), 0 while Redis has not been reached yet.
func (l *lazyRedis) Node(key string) int {
	if s := l.store.Load(); s != nil {
		return s.Node(key)
	}
	return 0
}

// NodeName implements sluice.Noder: the Redis store's name of node.
func (l *lazyRedis) NodeName(node int) string {
	if s := l.store.Load(); s != nil {
		return s.NodeName(node)
	}
	return ""
}

// Close closes the connection, if there is one, once.
func (l *lazyRedis) Close() {
	if s := l.store.Swap(nil); s != nil {
		s.Close()
	}
}
