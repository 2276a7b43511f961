package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/policyfile"
)

// daemonFlags are the flags that serve and proxy share, each with its
// environment variable.
type daemonFlags struct {
	path, redisURL, listen, logFormat, onError *string
	drain, reloadEvery                         *time.Duration
	gcMinHeap                                  *int         // MiB
	denialLog                                  *float64     // the share of denials logged
	showKeys                                   *bool        // client keys in the clear in logs and on the dashboard
	limits                                     *listenFlags // the listeners' bounds
	tls                                        *tlsFlags    // the listeners' TLS
}

// The default --listen addresses. serve's is the decision service's
// documented address; proxy's differs from it and from serve's gRPC
// default (--grpc-listen, 127.0.0.1:8081), so that both run side by side
// on one host with their defaults.
const (
	serveListen = "127.0.0.1:8080"
	proxyListen = "127.0.0.1:8082"
)

// addDaemonFlags defines the shared flags on fs; listen is the default of
// --listen, configs what --config may name.
func addDaemonFlags(fs *cmdFlags, listen, configs string) *daemonFlags {
	d := &daemonFlags{
		path:        fs.string("config", "SLUICE_CONFIG", "sluice.yaml", configs),
		redisURL:    fs.string("redis", "SLUICE_REDIS_URL", "", "Redis URL; overrides the file's redis.url (empty: the file's, or the in-memory store)"),
		listen:      fs.string("listen", "SLUICE_LISTEN", listen, "HTTP address"),
		logFormat:   fs.string("log-format", "SLUICE_LOG_FORMAT", "text", "log format: text or json"),
		onError:     fs.string("on-error", "SLUICE_ON_ERROR", "", "what to do while Redis fails: "+strings.Join(sluice.OutagePolicies, ", ")+"; overrides the file's redis.on_error (an envoyproxy/ratelimit file has none: default local)"),
		drain:       fs.duration("shutdown-timeout", "SLUICE_SHUTDOWN_TIMEOUT", 10*time.Second, "how long SIGTERM waits for in-flight requests"),
		reloadEvery: fs.duration("reload-interval", "SLUICE_RELOAD_INTERVAL", time.Second, "how often to check the config for changes (0: only on SIGHUP)"),
		limits:      addListenFlags(fs),
		tls:         addTLSFlags(fs),
		gcMinHeap:   new(int),
		denialLog: fs.float("log-denials", "SLUICE_LOG_DENIALS", policy.DefaultDenialLogRate,
			"the share of denials (and shadow denials) logged, each with its rule, limits, retry_after and client key: 0 none, 1 every one"),
		showKeys: fs.boolean("show-keys", "SLUICE_SHOW_KEYS", false,
			"show client keys in the clear where sluice shows them: the denial log and the reset log, and serve's dashboard and sluice top (default: masked, as # and 12 hex digits of their SHA-256, policy.MaskKey)"),
	}
	fs.intVar(d.gcMinHeap, "gc-min-heap-mib", "SLUICE_GC_MIN_HEAP_MIB", defaultGCMinHeapMiB,
		"the smallest heap, in MiB, at which the garbage collector runs: while the live heap is at most half of it, the collector waits until the process's memory nears it (GOGC off under a soft memory limit of it) rather than running every few MiB allocated, which costs a busy server a third of its CPU; a larger live heap is collected as under GOGC=100 (0: off; ignored when GOGC or GOMEMLIMIT is set)")
	return d
}

// start checks the parsed flags, returns the logger, and starts listening
// for SIGHUP (stop ends it).
func (d *daemonFlags) start(stderr io.Writer) (log *slog.Logger, hup chan os.Signal, stop func(), err error) {
	if *d.reloadEvery < 0 {
		return nil, nil, nil, usageError{fmt.Errorf("--reload-interval %v is negative", *d.reloadEvery)}
	}
	if *d.onError != "" && !slices.Contains(sluice.OutagePolicies, *d.onError) {
		return nil, nil, nil, usageError{fmt.Errorf("--on-error %q is not one of %s", *d.onError, strings.Join(sluice.OutagePolicies, ", "))}
	}
	if err := d.limits.check(); err != nil {
		return nil, nil, nil, usageError{err}
	}
	if r := *d.denialLog; !(r >= 0 && r <= 1) {
		return nil, nil, nil, usageError{fmt.Errorf("--log-denials %v is not a share between 0 (none) and 1 (every denial)", r)}
	}
	if *d.gcMinHeap < 0 {
		return nil, nil, nil, usageError{fmt.Errorf("--gc-min-heap-mib %d is negative (0: off)", *d.gcMinHeap)}
	}
	if log, err = newLogger(stderr, *d.logFormat); err != nil {
		return nil, nil, nil, usageError{err}
	}
	hup = make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return log, hup, func() { signal.Stop(hup) }, nil
}

// storeSettings returns the file's redis section r with --redis and
// --on-error in place of its url and on_error, when given. The file keeps
// its own section, which reloads compare with the next version's.
func (d *daemonFlags) storeSettings(r config.Redis) config.Redis {
	if *d.redisURL != "" {
		r.URL = *d.redisURL
	}
	if *d.onError != "" {
		r.OnError = *d.onError
	}
	return r
}

// serveUntil serves srv on ln until ctx ends or a server in errc fails.
// Then it drains srv, and runs also (which drains any other server),
// within one deadline, drain from now; what is still open then is closed.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener, errc chan error, drain time.Duration, log *slog.Logger, also func(context.Context)) error {
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", drain)
	shutdown, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	alsoDone := make(chan struct{})
	go func() {
		if also != nil {
			also(shutdown)
		}
		close(alsoDone)
	}()
	err := srv.Shutdown(shutdown)
	<-alsoDone
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// engineOptions are the engine's options the flags set.
func (d daemonFlags) engineOptions() policyfile.Option {
	return policyfile.WithEngineOptions(policy.WithDenialLog(*d.denialLog), policy.WithPlainKeys(*d.showKeys))
}

// newLogger returns a slog logger writing text or JSON to w.
func newLogger(w io.Writer, format string) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("log format %q is not one of text, json", format)
}
