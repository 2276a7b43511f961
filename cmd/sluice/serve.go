package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/envoy"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/policyfile"
	"github.com/sluice-go/sluice/server"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("serve", "Serve rate-limit decisions over HTTP: POST /v1/check, POST /v1/check/batch,\nGET /healthz and GET /readyz. SIGHUP, or a change to the policy file, reloads the rules.", stdout)
	df := addDaemonFlags(fs, serveListen)
	grpcListen := fs.string("grpc-listen", "SLUICE_GRPC_LISTEN", "127.0.0.1:8081", "gRPC address of Envoy's rate-limit service (empty: off)")
	df.limits.addServeBodyFlag(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	log, hup, stopHUP, err := df.start(stderr)
	if err != nil {
		return err
	}
	defer stopHUP()
	path := df.path
	m := metrics.New()
	open := []policyfile.Option{policyfile.WithLogger(log), policyfile.WithRedis(df.storeSettings),
		policyfile.WithStore(m.Store), policyfile.WithObserver(m.Decision), policyfile.WithReloadReport(m.Reload),
		policyfile.WithBreakerReport(m.Breaker), policyfile.WithMemoryStore(m.MemoryStore)}
	// A file written for envoyproxy/ratelimit configures the Envoy gRPC
	// service; a sluice policy file, the HTTP API and Envoy's gRPC, both
	// deciding through one engine.
	var (
		ecfg   *envoy.Config
		loaded []byte // the envoy file as loaded, to catch an edit before its watch starts
		p      *policyfile.Policy
		back   *policyfile.Backend
		rules  int
	)
	if isEnvoyConfig(*path) {
		if loaded, err = config.ReadFile(*path); err != nil {
			return err
		}
		if ecfg, err = envoy.ParseConfig(*path, loaded); err != nil {
			return err
		}
		if back, err = policyfile.OpenBackend(df.storeSettings(config.Redis{OnError: "local", Timeout: sluice.DefaultStoreTimeout}), open...); err != nil {
			return err
		}
	} else {
		if p, err = policyfile.Open(*path, open...); err != nil {
			return err
		}
		back = &policyfile.Backend{Limiter: p.Limiter(), Ready: p.Ready, Close: p.Close}
		rules = len(p.File().Rules)
	}
	defer back.Close()
	ln, err := net.Listen("tcp", *df.listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	if p != nil {
		mux.Handle("/", server.New(p.Engine(), server.WithReady(p.Ready)))
	} else {
		mux.Handle("/", server.New(policy.New(back.Limiter, nil), server.WithReady(back.Ready)))
	}
	// The probes and the metrics answer whatever the load: an orchestrator
	// that saw them fail at --max-inflight would restart a busy replica,
	// or stop watching it, when it is needed most.
	srv := df.limits.serveServer(mux, func(r *http.Request) bool {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			return true
		}
		return false
	}, log)
	ctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	errc := make(chan error, 2)
	grpcAddr := "off"
	var g *grpc.Server
	if *grpcListen != "" {
		gln, err := net.Listen("tcp", *grpcListen)
		if err != nil {
			return err
		}
		g = df.limits.grpcServer(log)
		if ecfg != nil {
			svc := envoy.NewService(back.Limiter, ecfg, envoy.WithHeaders(envoy.HeadersIETF), envoy.WithObserver(m.Decision))
			envoy.Register(g, svc)
			watchEnvoyConfig(ctx, *path, loaded, *df.reloadEvery, hup, svc.Update, m.Reload, log)
		} else {
			envoy.Register(g, envoy.NewRulesService(p.Engine()))
		}
		go func() { errc <- g.Serve(gln) }()
		grpcAddr = gln.Addr().String()
	}
	if p != nil {
		p.Watch(ctx, *df.reloadEvery, hup)
	}
	log.Info("serving", "http", ln.Addr().String(), "grpc", grpcAddr, "config", *path, "rules", rules)
	return serveUntil(ctx, srv, ln, errc, *df.drain, log, func(ctx context.Context) {
		if g != nil {
			stopGRPC(ctx, g)
		}
	})
}

// watchEnvoyConfig reloads a file written for envoyproxy/ratelimit as
// policyfile.Policy.Watch reloads a policy file: a valid file goes to
// apply (envoy.Service.Update), an invalid one is logged and leaves the
// old configuration serving. loaded is the file as it was loaded: when it
// has changed by the time the watch starts, it is reloaded at once.
func watchEnvoyConfig(ctx context.Context, path string, loaded []byte, interval time.Duration, hup <-chan os.Signal, apply func(*envoy.Config), report func(ok bool), log *slog.Logger) {
	reload := func(trigger string) {
		cfg, err := envoy.LoadConfig(path)
		report(err == nil)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				policyfile.Rejected(log, path, trigger, errors.New(line))
			}
			return
		}
		apply(cfg)
		log.Info("config reloaded", "config", path, "trigger", trigger)
	}
	policyfile.WatchFile(ctx, path, interval, hup, reload)
	if now, err := config.ReadFile(path); err == nil && !bytes.Equal(now, loaded) {
		reload("file changed")
	}
}

// isEnvoyConfig reports whether the file at path is written for
// envoyproxy/ratelimit: a mapping with a top-level domain.
func isEnvoyConfig(path string) bool {
	data, err := config.ReadFile(path)
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
