package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
)

// backend is the store a command decides with.
type backend struct {
	lim   *sluice.Limiter
	ready func(ctx context.Context) error // nil error: able to decide
	close func()
}

// openBackend builds the Limiter the policy file asks for; redisURL, when
// not empty, overrides the file's redis.url. Without a URL it is the
// in-memory store, said once in the log, since its limits hold per process.
func openBackend(f *config.File, redisURL string, m *metrics.Metrics, log *slog.Logger) (*backend, error) {
	url := f.Redis.URL
	if redisURL != "" {
		url = redisURL
	}
	if url == "" {
		log.Warn("no Redis configured: using the in-memory store, whose limits hold per process (N replicas admit N x the limit)")
		return &backend{
			lim:   sluice.New(m.Store(memory.New())),
			ready: func(context.Context) error { return nil },
			close: func() {},
		}, nil
	}
	policy, err := sluice.ParseErrorPolicy(f.Redis.OnError, memory.New())
	if err != nil {
		return nil, err
	}
	store, err := redis.Open(url)
	if err != nil {
		// The URL may hold a password: never print it, not even quoted in
		// a parse error.
		var uerr *neturl.Error
		if errors.As(err, &uerr) {
			return nil, fmt.Errorf("invalid Redis URL: %w", uerr.Err)
		}
		return nil, fmt.Errorf("cannot reach Redis: %w", err)
	}
	lim := sluice.New(m.Store(store), sluice.WithErrorPolicy(policy), sluice.WithStoreTimeout(f.Redis.Timeout))
	log.Info("store", "kind", "redis", "on_error", policy.String(), "timeout", f.Redis.Timeout)
	ready := func(context.Context) error { return nil }
	if policy.String() == "deny" {
		// Under deny every decision fails while Redis does: not ready.
		ready = store.Ping
	}
	return &backend{lim: lim, ready: ready, close: store.Close}, nil
}
