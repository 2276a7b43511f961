package policyfile

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
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
// Open does, with the logger and store wrapper of opts (other options do
// not apply). Without a URL it is the in-memory store, said once in the
// log, since its limits hold per process.
func OpenBackend(r config.Redis, opts ...Option) (*Backend, error) {
	st := defaults()
	for _, o := range opts {
		o(&st)
	}
	return openBackend(r, st.wrap, st.log)
}

func openBackend(r config.Redis, wrap func(sluice.Store) sluice.Store, log *slog.Logger) (*Backend, error) {
	if wrap == nil {
		wrap = func(s sluice.Store) sluice.Store { return s }
	}
	if r.URL == "" {
		log.Warn("no Redis configured: using the in-memory store, whose limits hold per process (N replicas admit N x the limit)")
		return &Backend{
			Limiter: sluice.New(wrap(memory.New())),
			Ready:   func(context.Context) error { return nil },
			Close:   func() {},
		}, nil
	}
	policy, err := sluice.ParseErrorPolicy(r.OnError, memory.New())
	if err != nil {
		return nil, err
	}
	if err := redis.CheckURL(r.URL); err != nil {
		return nil, err
	}
	store := &lazyRedis{url: r.URL, log: log}
	ctx, cancel := context.WithCancel(context.Background())
	store.connect(ctx)
	lim := sluice.New(wrap(&stateLog{next: store, log: log}), sluice.WithErrorPolicy(policy), sluice.WithStoreTimeout(r.Timeout))
	log.Info("store", "kind", "redis", "on_error", policy.String(), "timeout", r.Timeout)
	ready := func(context.Context) error { return nil }
	if policy == sluice.DenyOnError {
		// Under deny every decision fails while Redis does: not ready.
		ready = store.Ping
	}
	return &Backend{Limiter: lim, Ready: ready, Close: func() { cancel(); store.Close() }}, nil
}

// errNotConnected is the store error while Redis has not been reached yet.
var errNotConnected = errors.New("redis store: not connected yet")

// lazyRedis is the Redis store once it is reachable: sluice starts (and
// the error policy decides) while Redis is down, and connects as soon as
// it can, logging the change.
type lazyRedis struct {
	url   string
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
	l.log.Warn("redis unreachable; the error policy decides until it is reachable", "err", err)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if l.try() == nil {
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
	s, err := redis.Open(l.url)
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

// Reset resets key's limits in the Redis store, or fails with
// errNotConnected while Redis has not been reached yet.
func (l *lazyRedis) Reset(ctx context.Context, key string, limits ...sluice.Limit) error {
	s := l.store.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Reset(ctx, key, limits...)
}

// Ping reports whether Redis answers.
func (l *lazyRedis) Ping(ctx context.Context) error {
	s := l.store.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Ping(ctx)
}

// Close closes the connection, if there is one, once.
func (l *lazyRedis) Close() {
	if s := l.store.Swap(nil); s != nil {
		s.Close()
	}
}

// stateLog logs the store's state changes, one line each: when it starts
// failing (the error policy decides from then on) and when it recovers.
type stateLog struct {
	next    sluice.Store
	log     *slog.Logger
	failing atomic.Bool
}

// observe logs the store's change of state, if err makes one.
func (s *stateLog) observe(err error) {
	switch {
	case err != nil && !errors.Is(err, context.Canceled) && s.failing.CompareAndSwap(false, true):
		s.log.Warn("store failing; the error policy decides until it recovers", "err", err)
	case err == nil && s.failing.CompareAndSwap(true, false):
		s.log.Info("store recovered")
	}
}

// Take decides with the next store, logging a change of its state.
func (s *stateLog) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	rs, err := s.next.Take(ctx, req)
	s.observe(err)
	return rs, err
}

// Reset resets key's limits in the next store, logging a change of its
// state.
func (s *stateLog) Reset(ctx context.Context, key string, limits ...sluice.Limit) error {
	err := s.next.Reset(ctx, key, limits...)
	s.observe(err)
	return err
}
