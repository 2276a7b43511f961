package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
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
	df := addDaemonFlags(fs, serveListen)
	grpcListen := fs.string("grpc-listen", "SLUICE_GRPC_LISTEN", "127.0.0.1:8081", "gRPC address of Envoy's rate-limit service (empty: off)")
	if err := fs.parse(args); err != nil {
		return err
	}
	log, hup, stopHUP, err := df.start(stderr)
	if err != nil {
		return err
	}
	defer stopHUP()
	path := df.path
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
	m := metrics.New()
	b, err := openBackend(df.storeSettings(f.Redis), m, log)
	if err != nil {
		return err
	}
	defer b.close()
	ln, err := net.Listen("tcp", *df.listen)
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
	update := func(f *config.File) error { api.Update(f); return nil }
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
			watchEnvoyConfig(ctx, *path, *df.reloadEvery, hup, svc.Update, m.Reload, log)
		} else {
			svc := envoy.NewRulesService(b.lim, f, envoy.WithRulesObserver(m.Decision))
			envoy.Register(g, svc)
			update = func(f *config.File) error { api.Update(f); svc.Update(f); return nil }
		}
		go func() { errc <- g.Serve(gln) }()
		grpcAddr = gln.Addr().String()
	}
	if ecfg == nil {
		watchConfig(ctx, f, *df.reloadEvery, hup, update, m.Reload, log)
	}
	log.Info("serving", "http", ln.Addr().String(), "grpc", grpcAddr, "config", *path, "rules", len(f.Rules))
	return serveUntil(ctx, srv, ln, errc, *df.drain, log, func(ctx context.Context) {
		if g != nil {
			stopGRPC(ctx, g)
		}
	})
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
