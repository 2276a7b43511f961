package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/internal/service/server"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/policyfile"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("serve", "Serve rate-limit decisions over HTTP: POST /v1/check, POST /v1/check/batch,\nGET /healthz and GET /readyz, and Envoy's rate limit service over gRPC (with gRPC\nhealth checks) and at POST /json, with GET /healthcheck, as envoyproxy/ratelimit\nserves them. --config is a sluice policy file, or an envoyproxy/ratelimit file or\ndirectory of them (as its RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY).\nSIGHUP, or a change to the config (any file of a directory, or one added or\nremoved), reloads it as a whole. GET / is the live dashboard, and /admin/v1/ the\noperator API of sluice inspect, reset and top (reset only with SLUICE_ADMIN_TOKEN set).\nThe --envoy-* and --merge-domains flags apply only to an envoyproxy/ratelimit config:\ngiven with a sluice policy file, they are a usage error.", stdout)
	df := addDaemonFlags(fs, serveListen, "sluice policy file, or envoyproxy/ratelimit file or directory of them")
	grpcListen := fs.string("grpc-listen", "SLUICE_GRPC_LISTEN", "127.0.0.1:8081", "gRPC address of Envoy's rate-limit service (empty: off)")
	ef := addEnvoyFlags(fs)
	pprofListen := fs.string("pprof-listen", "SLUICE_PPROF_LISTEN", "", "address of a listener serving Go's runtime profiles at /debug/pprof/ (net/http/pprof), such as 127.0.0.1:6060, for finding where a busy server spends its time; keep it on loopback (empty: off)")
	df.limits.addServeBodyFlag(fs)
	dashFlags := addDashboardFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	svcOpts, err := ef.serviceOptions()
	if err != nil {
		return err
	}
	isEnvoy := envoy.IsConfig(*df.path)
	if err := ef.forConfig(*df.path, isEnvoy); err != nil {
		return err
	}
	log, hup, stopHUP, err := df.start(stderr)
	if err != nil {
		return err
	}
	defer stopHUP()
	keepMinHeap(ctx, int64(*df.gcMinHeap)<<20)
	ls, stopTLS, err := df.tls.open(ctx, *df.reloadEvery, log)
	if err != nil {
		return err
	}
	defer stopTLS()
	path := df.path
	m := metrics.New()
	dash, err := dashFlags.open(m, *path, *df.listen, isEnvoy, *df.showKeys, log)
	if err != nil {
		return err
	}
	open := []policyfile.Option{policyfile.WithLogger(log), policyfile.WithRedis(df.storeSettings),
		policyfile.WithHooks(m.Hooks()), policyfile.WithObserver(dash.observer(m.Decision)), policyfile.WithReloadReport(dash.reloaded(m.Reload)),
		policyfile.WithMemoryStore(m.MemoryStore), df.engineOptions(),
		policyfile.WithEngineOptions(policy.WithSettleObserver(m.Settled), policy.WithShedObserver(m.Shed), policy.WithSlotObserver(m.Slots))}
	// A file or directory written for envoyproxy/ratelimit configures the
	// Envoy gRPC service; a sluice policy file, the HTTP API and Envoy's
	// gRPC, both deciding through one engine.
	var (
		ecfg   *envoy.Config
		loaded policyfile.Version // the envoy files as loaded, to catch an edit before their watch starts
		p      *policyfile.Policy
		back   *policyfile.Backend
		counts []any // what the config holds, for the start log
	)
	if isEnvoy {
		loaded = policyfile.VersionOf(func() ([]string, error) { return envoyFiles(*path) })
		if ecfg, err = envoy.LoadConfig(*path, ef.loadOptions()...); err != nil {
			return err
		}
		if back, err = policyfile.OpenBackend(df.storeSettings(config.DefaultRedis()), open...); err != nil {
			return err
		}
		counts = envoyCounts(ecfg)
	} else {
		if p, err = policyfile.Open(*path, open...); err != nil {
			return err
		}
		back = &policyfile.Backend{Limiter: p.Limiter(), Ready: p.Ready, Close: p.Close}
		counts = []any{"rules", len(p.File().Rules)}
		m.Rules(func() []string { return ruleNames(p.Engine()) })
	}
	defer back.Close()
	ln, err := ls.listen("--listen", *df.listen)
	if err != nil {
		return err
	}
	// Envoy's rate limit service: over gRPC, and over HTTP at POST /json
	// as envoyproxy/ratelimit serves it.
	var (
		rls   rlsv3.RateLimitServiceServer
		esvc  *envoy.Service
		ready = back.Ready
	)
	if ecfg != nil {
		svcOpts = append(svcOpts, envoy.WithObserver(dash.observer(m.Decision)), envoy.WithUnknownDomain(m.UnknownDomain), envoy.WithLogger(log))
		esvc = envoy.NewService(back.Limiter, ecfg, svcOpts...)
		m.Rules(func() []string { return esvc.Config().Labels() })
		rls = esvc
	} else {
		rls, ready = envoy.NewRulesService(p.Engine()), p.Ready
	}
	ctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	health := startHealth(ctx, ready)
	var api *server.Server
	if p != nil {
		api = server.New(p.Engine(), server.WithReady(p.Ready))
	} else {
		api = server.New(policy.New(back.Limiter, nil), server.WithReady(back.Ready))
	}
	mux := http.NewServeMux()
	for _, rt := range serveRoutes(m, rls, health, api) {
		mux.Handle(rt.pattern, rt.handler)
	}
	dashAttrs, stopDash, err := dash.serve(ctx, mux, ls, engineOf(p), back.Limiter, ecfg, log)
	if err != nil {
		return err
	}
	defer stopDash()
	counts = append(counts, dashAttrs...)
	// The probes and the metrics answer whatever the load: an orchestrator
	// that saw them fail at --max-inflight would restart a busy replica,
	// or stop watching it, when it is needed most.
	srv := df.limits.serveServer(mux, func(r *http.Request) bool {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/healthcheck", "/metrics":
			return true
		}
		return false
	}, log)
	errc := make(chan error, 2)
	grpcAddr := "off"
	var g *grpc.Server
	if *grpcListen != "" {
		gln, err := net.Listen("tcp", *grpcListen)
		if err != nil {
			return err
		}
		g = df.limits.grpcServer(log, append(ls.grpcOptions(), grpc.ChainUnaryInterceptor(timeDecisions(m)))...)
		envoy.Register(g, rls)
		health.register(g)
		go func() { errc <- g.Serve(gln) }()
		grpcAddr = gln.Addr().String()
	}
	if esvc != nil {
		watchEnvoyConfig(ctx, *path, loaded, ef.loadOptions(), *df.reloadEvery, hup, dash.envoyApply(esvc.Update), dash.reloaded(m.Reload), log)
	}
	if p != nil {
		p.Watch(ctx, *df.reloadEvery, hup)
	}
	if ecfg != nil {
		warnNoDomains(log, *path, ecfg)
	}
	if *pprofListen != "" {
		stop, addr, err := servePprof(ls, *pprofListen, log)
		if err != nil {
			return err
		}
		defer stop()
		counts = append(counts, "pprof", addr)
	}
	counts = append(counts, ls.attrs()...)
	log.Info("serving", append([]any{"http", ln.Addr().String(), "grpc", grpcAddr, "config", *path}, counts...)...)
	return serveUntil(ctx, srv, ln, errc, *df.drain, log, func(ctx context.Context) {
		health.drain()
		if g != nil {
			stopGRPC(ctx, g)
		}
	})
}

// route is one pattern of serve's --listen and its handler.
type route struct {
	pattern string
	handler http.Handler
}

// serveRoutes returns the routes of serve's --listen but the dashboard's
// (admin.Handler.Register adds those): the Prometheus metrics, Envoy's
// rate limit service over JSON and its health check, and the decision
// API, whose paths the metrics time as the http door's. docs/openapi.yaml
// documents every one (TestOpenAPIRoutes).
func serveRoutes(m *metrics.Metrics, rls rlsv3.RateLimitServiceServer, health http.Handler, api *server.Server) []route {
	return []route{
		{"GET /metrics", m.Handler()},
		{"/metrics", getOnly()}, // another method: 405, not the API's 404
		// Any method, as envoyproxy/ratelimit routes them.
		{"/json", m.Time(metrics.DoorJSON, envoy.JSONHandler(rls))},
		{"/healthcheck", health},
		{"/", api},
		{"/v1/check", m.Time(metrics.DoorHTTP, api)},
		{"/v1/check/batch", m.Time(metrics.DoorHTTP, api)},
	}
}

// getOnly answers 405 with Allow: GET, HEAD, for a path served only to
// GET (and HEAD, which GET's pattern takes too).
func getOnly() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		httpjson.Error(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED",
			fmt.Sprintf("method %s is not allowed on %s; use GET", r.Method, r.URL.Path))
	})
}

// timeDecisions records the latency of Envoy's ShouldRateLimit calls as
// the grpc door's.
func timeDecisions(m *metrics.Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if info.FullMethod != rlsv3.RateLimitService_ShouldRateLimit_FullMethodName {
			return next(ctx, req)
		}
		start := time.Now()
		resp, err := next(ctx, req)
		m.ObserveDoor(metrics.DoorGRPC, time.Since(start))
		return resp, err
	}
}

// ruleNames returns the names of e's rules.
func ruleNames(e *policy.Engine) []string {
	rules := e.Rules().Rules()
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.Name
	}
	return names
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

// servePprof serves net/http/pprof's profiles on a listener of ls at
// addr, of a mux of their own (not http.DefaultServeMux), and returns how
// to stop it and the address it listens on.
func servePprof(ls *listeners, addr string, log *slog.Logger) (stop func(), bound string, err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return ls.serveAside("--pprof-listen", addr, mux, log)
}
