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
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/envoy"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/server"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("serve", "Serve rate-limit decisions over HTTP: POST /v1/check, POST /v1/check/batch,\nGET /healthz and GET /readyz. SIGHUP, or a change to the policy file, reloads the rules.", stdout)
	path := fs.String("config", "sluice.yaml", envUsage("policy file", "SLUICE_CONFIG"))
	redisURL := fs.String("redis", "", envUsage("Redis URL; overrides the file's redis.url (empty: the file's, or the in-memory store)", "SLUICE_REDIS_URL"))
	listen := fs.String("listen", "127.0.0.1:8080", envUsage("HTTP address", "SLUICE_LISTEN"))
	logFormat := fs.String("log-format", "text", envUsage("log format: text or json", "SLUICE_LOG_FORMAT"))
	drain := fs.Duration("shutdown-timeout", 10*time.Second, envUsage("how long SIGTERM waits for in-flight requests", "SLUICE_SHUTDOWN_TIMEOUT"))
	reloadEvery := fs.Duration("reload-interval", time.Second, envUsage("how often to check the policy file for changes (0: only on SIGHUP)", "SLUICE_RELOAD_INTERVAL"))
	onError := fs.String("on-error", "", envUsage("what to do while Redis fails: allow, deny or local; overrides the file's redis.on_error (an envoyproxy/ratelimit file has none: default local)", "SLUICE_ON_ERROR"))
	grpcListen := fs.String("grpc-listen", "127.0.0.1:8081", envUsage("gRPC address of Envoy's rate-limit service (empty: off)", "SLUICE_GRPC_LISTEN"))
	err := parse(fs, args, map[string]string{
		"config": "SLUICE_CONFIG", "redis": "SLUICE_REDIS_URL", "listen": "SLUICE_LISTEN",
		"log-format": "SLUICE_LOG_FORMAT", "shutdown-timeout": "SLUICE_SHUTDOWN_TIMEOUT",
		"reload-interval": "SLUICE_RELOAD_INTERVAL", "grpc-listen": "SLUICE_GRPC_LISTEN", "on-error": "SLUICE_ON_ERROR",
	})
	if err != nil {
		return err
	}
	if *reloadEvery < 0 {
		return usageError{fmt.Errorf("--reload-interval %v is negative", *reloadEvery)}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log, err := newLogger(stderr, *logFormat)
	if err != nil {
		return usageError{err}
	}
	// A file written for envoyproxy/ratelimit configures the Envoy gRPC
	// service; a sluice policy file, the HTTP API.
	var ecfg *envoy.Config
	f := &config.File{Path: *path, Redis: config.Redis{OnError: "local", Timeout: sluice.DefaultStoreTimeout}}
	if isEnvoyConfig(*path) {
		if ecfg, err = envoy.LoadConfig(*path); err != nil {
			return err
		}
	} else if f, err = config.Load(*path); err != nil {
		return err
	}
	switch *onError {
	case "":
	case "allow", "deny", "local":
		f.Redis.OnError = *onError
	default:
		return usageError{fmt.Errorf("--on-error %q is not one of allow, deny, local", *onError)}
	}
	m := metrics.New()
	b, err := openBackend(f, *redisURL, m, log)
	if err != nil {
		return err
	}
	defer b.close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	api := server.New(b.lim, f, server.WithReady(b.ready), server.WithLogger(log), server.WithObserver(m.Decision))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.Handle("/", api)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
	}
	ctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	errc := make(chan error, 2)
	grpcAddr := "off"
	update := api.Update
	var g *grpc.Server
	if *grpcListen != "" {
		gln, err := net.Listen("tcp", *grpcListen)
		if err != nil {
			return err
		}
		g = grpc.NewServer()
		if ecfg != nil {
			svc := envoy.NewService(b.lim, ecfg, envoy.WithResponseHeaders(), envoy.WithObserver(m.Decision))
			envoy.Register(g, svc)
			watchEnvoyConfig(ctx, *path, *reloadEvery, hup, svc.Update, m.Reload, log)
		} else {
			svc := envoy.NewRulesService(b.lim, f, envoy.WithRulesObserver(m.Decision))
			envoy.Register(g, svc)
			update = func(f *config.File) { api.Update(f); svc.Update(f) }
		}
		go func() { errc <- g.Serve(gln) }()
		grpcAddr = gln.Addr().String()
	}
	if ecfg == nil {
		watchConfig(ctx, f, *reloadEvery, hup, update, m.Reload, log)
	}
	log.Info("serving", "http", ln.Addr().String(), "grpc", grpcAddr, "config", *path, "rules", len(f.Rules))
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", *drain)
	// HTTP and gRPC drain together, within one deadline; what is still
	// open then is closed.
	shutdown, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	grpcDone := make(chan struct{})
	go func() {
		if g != nil {
			stopGRPC(shutdown, g)
		}
		close(grpcDone)
	}()
	err = srv.Shutdown(shutdown)
	<-grpcDone
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
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

// isEnvoyConfig reports whether the file at path is written for
// envoyproxy/ratelimit: a mapping with a top-level domain.
func isEnvoyConfig(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var top map[string]any
	if yaml.Unmarshal(data, &top) != nil {
		return false
	}
	_, ok := top["domain"]
	return ok
}

// stopGRPC drains g until ctx ends, then stops it.
func stopGRPC(ctx context.Context, g *grpc.Server) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		g.Stop()
		<-done
	}
}
