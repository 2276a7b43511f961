package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/server"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("serve", "Serve rate-limit decisions over HTTP: POST /v1/check, POST /v1/check/batch,\nGET /healthz and GET /readyz.", stdout)
	path := fs.String("config", "sluice.yaml", envUsage("policy file", "SLUICE_CONFIG"))
	redisURL := fs.String("redis", "", envUsage("Redis URL; overrides the file's redis.url (empty: the file's, or the in-memory store)", "SLUICE_REDIS_URL"))
	listen := fs.String("listen", "127.0.0.1:8080", envUsage("HTTP address", "SLUICE_LISTEN"))
	logFormat := fs.String("log-format", "text", envUsage("log format: text or json", "SLUICE_LOG_FORMAT"))
	drain := fs.Duration("shutdown-timeout", 10*time.Second, envUsage("how long SIGTERM waits for in-flight requests", "SLUICE_SHUTDOWN_TIMEOUT"))
	err := parse(fs, args, map[string]string{
		"config": "SLUICE_CONFIG", "redis": "SLUICE_REDIS_URL", "listen": "SLUICE_LISTEN",
		"log-format": "SLUICE_LOG_FORMAT", "shutdown-timeout": "SLUICE_SHUTDOWN_TIMEOUT",
	})
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, *logFormat)
	if err != nil {
		return usageError{err}
	}
	f, err := config.Load(*path)
	if err != nil {
		return err
	}
	b, err := openBackend(f, *redisURL, log)
	if err != nil {
		return err
	}
	defer b.close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           server.New(b.lim, f, server.WithReady(b.ready), server.WithLogger(log)),
		ReadHeaderTimeout: 5 * time.Second,
	}
	log.Info("serving", "http", ln.Addr().String(), "config", *path, "rules", len(f.Rules))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", *drain)
	shutdown, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
