package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/envoy"
)

// fingerprint identifies one version of the policy file by its content's
// SHA-256: a file touched or rewritten unchanged is the same version. A
// missing or unreadable file has the zero sum with err set.
type fingerprint struct {
	sum [sha256.Size]byte
	err string
}

// fingerprintOf reads the file at path. It opens the path afresh, following
// symbolic links, so a file replaced by rename (as editors and Kubernetes
// ConfigMaps do) is seen as the new file.
func fingerprintOf(path string) fingerprint {
	data, err := os.ReadFile(path)
	if err != nil {
		return fingerprint{err: err.Error()}
	}
	return fingerprint{sum: sha256.Sum256(data)}
}

// watchConfig reloads the policy file cur was loaded from on every signal
// from hup and, when interval is positive, whenever the file's content
// changes (its hash, polled every interval). A valid file is handed to
// apply, which must swap the rules atomically (as server.Server.Update
// does) or, returning an error, leave them as they were; the file is
// logged as "config reloaded" only when apply succeeds. A file that fails
// to load or to apply is logged as rejected, one line per error, and the
// old rules keep serving; report hears which it was. The redis section
// cannot change at runtime: a file whose section differs from cur's still
// has its rules applied, with a warning that the store settings need a
// restart.
//
// watchConfig takes the file's first fingerprint before it returns, so
// any later change is seen; the watching goroutine stops with ctx.
func watchConfig(ctx context.Context, cur *config.File, interval time.Duration, hup <-chan os.Signal, apply func(*config.File) error, report func(ok bool), log *slog.Logger) {
	path, running := cur.Path, cur.Redis
	watchFile(ctx, path, interval, hup, func(trigger string) {
		f, err := config.Load(path)
		if err == nil {
			err = apply(f)
		}
		report(err == nil)
		if err != nil {
			var errs config.Errors
			if !errors.As(err, &errs) {
				rejected(log, path, trigger, err)
				return
			}
			for _, e := range errs {
				rejected(log, path, trigger, e)
			}
			return
		}
		log.Info("config reloaded", "config", path, "trigger", trigger, "rules", len(f.Rules))
		if f.Redis != running {
			// Never log the URLs: they may hold a password.
			log.Warn("the redis section changed; the store keeps its old settings until a restart", "config", path)
		}
	})
}

// watchEnvoyConfig is watchConfig for a file written for
// envoyproxy/ratelimit: a valid file goes to apply (envoy.Service.Update).
func watchEnvoyConfig(ctx context.Context, path string, interval time.Duration, hup <-chan os.Signal, apply func(*envoy.Config), report func(ok bool), log *slog.Logger) {
	watchFile(ctx, path, interval, hup, func(trigger string) {
		cfg, err := envoy.LoadConfig(path)
		report(err == nil)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				rejected(log, path, trigger, errors.New(line))
			}
			return
		}
		apply(cfg)
		log.Info("config reloaded", "config", path, "trigger", trigger)
	})
}

func rejected(log *slog.Logger, path, trigger string, err error) {
	log.Error("config rejected; the old rules keep serving", "config", path, "trigger", trigger, "error", err.Error())
}

// watchFile calls reload on every signal from hup and, when interval is
// positive, whenever the file's fingerprint changes (polled every
// interval). It takes the first fingerprint before it returns; the
// watching goroutine stops with ctx.
func watchFile(ctx context.Context, path string, interval time.Duration, hup <-chan os.Signal, reload func(trigger string)) {
	last := fingerprintOf(path)
	go func() {
		var tick <-chan time.Time // nil: polling disabled
		if interval > 0 {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				last = fingerprintOf(path)
				reload("signal")
			case <-tick:
				fp := fingerprintOf(path)
				if fp == last {
					continue
				}
				last = fp
				reload("file changed")
			}
		}
	}()
}
