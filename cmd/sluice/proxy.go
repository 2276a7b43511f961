package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/policyfile"
)

func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("proxy", "Run a rate-limiting reverse proxy: requests within the policy file's limits\nare forwarded to the upstream, the others get 429.", stdout)
	df := addDaemonFlags(fs, proxyListen, "policy file")
	upstreamFlag := fs.string("upstream", "SLUICE_UPSTREAM", "", "upstream URL, such as http://127.0.0.1:3000 (required)")
	metricsListen := fs.string("metrics-listen", "SLUICE_METRICS_LISTEN", "", "address of a listener serving the Prometheus metrics at GET /metrics, such as 127.0.0.1:9464 (empty: off); every path of --listen is the upstream's")
	df.limits.addProxyBodyFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	upstream, err := parseUpstream(*upstreamFlag)
	if err != nil {
		return usageError{err}
	}
	if envoy.IsConfig(*df.path) {
		// Its errors as a policy file would only confuse.
		return usageError{fmt.Errorf("%s is a directory or an envoyproxy/ratelimit file, which only Envoy's rate limit service of sluice serve answers; the proxy takes a sluice policy file", *df.path)}
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
	// The forwarder is rebuilt from each valid reload, with the file's
	// trusted proxies, and swapped in whole: requests in flight finish
	// with the one they started with.
	var (
		p       *policyfile.Policy
		forward atomic.Pointer[httputil.ReverseProxy]
	)
	// The metrics are kept only for a --metrics-listen to serve: without
	// one, no request pays for them.
	var m *metrics.Metrics
	forwarding := func(err error) {
		if m != nil {
			m.Reload(err)
		}
		if err == nil {
			forward.Store(newReverseProxy(upstream, p.File().HTTP.TrustedProxies, log))
		}
	}
	opts := []policyfile.Option{policyfile.WithLogger(log), policyfile.WithRedis(df.storeSettings), policyfile.WithReloadReport(forwarding), df.engineOptions()}
	if *metricsListen != "" {
		m = metrics.New()
		opts = append(opts, policyfile.WithHooks(m.Hooks()), policyfile.WithObserver(m.Decision), policyfile.WithMemoryStore(m.MemoryStore),
			policyfile.WithEngineOptions(policy.WithSettleObserver(m.Settled), policy.WithShedObserver(m.Shed), policy.WithSlotObserver(m.Slots)))
	}
	p, err = policyfile.Open(*df.path, opts...)
	if err != nil {
		return err
	}
	defer p.Close()
	forward.Store(newReverseProxy(upstream, p.File().HTTP.TrustedProxies, log))
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { forward.Load().ServeHTTP(w, r) })
	h := p.Middleware(next)
	if m != nil {
		m.Rules(func() []string { return ruleNames(p.Engine()) })
		h = timeProxy(m, p.Middleware, next)
	}
	ln, err := ls.listen("--listen", *df.listen)
	if err != nil {
		return err
	}
	ctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	p.Watch(ctx, *df.reloadEvery, hup)
	srv := df.limits.proxyServer(h, log)
	counts := append([]any{"rules", len(p.File().Rules)}, ls.attrs()...)
	if m != nil {
		stop, addr, err := ls.serveAside("--metrics-listen", *metricsListen, m.Handler(), log)
		if err != nil {
			return err
		}
		defer stop()
		counts = append(counts, "metrics", addr)
	}
	if names := byName(p.File().Rules); names != "" {
		log.Info("rules keyed by request are checked by name, through sluice serve's POST /v1/check and gRPC: the proxy never applies them", "rules", names)
	}
	log.Info("proxying", append([]any{"http", ln.Addr().String(), "upstream", upstream.Redacted(), "config", *df.path}, counts...)...)
	return serveUntil(ctx, srv, ln, make(chan error, 1), *df.drain, log, nil)
}

// byName returns the names of the rules keyed by request, which no HTTP
// request matches, joined by commas.
func byName(rules []policy.Rule) string {
	var names []string
	for _, r := range rules {
		if r.Key.Source == policy.KeyRequest {
			names = append(names, r.Name)
		}
	}
	return strings.Join(names, ",")
}

// parseUpstream checks that s is an absolute http or https URL.
// timeProxy returns limit(next), the proxy's handler, with the time each
// request took to be decided recorded as the proxy door's: until it is
// refused, or until it reaches next to be forwarded (the upstream's time
// is not the decision's).
func timeProxy(m *metrics.Metrics, limit func(http.Handler) http.Handler, next http.Handler) http.Handler {
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t, ok := r.Context().Value(proxyTimerKey{}).(*proxyTimer); ok {
			t.decided = true
			m.ObserveDoor(metrics.DoorProxy, time.Since(t.start))
		}
		next.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := &proxyTimer{start: time.Now()}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), proxyTimerKey{}, t)))
		if !t.decided {
			m.ObserveDoor(metrics.DoorProxy, time.Since(t.start))
		}
	})
}

// proxyTimer is when a proxied request arrived, and whether its decision
// was recorded when it was admitted.
type proxyTimer struct {
	start   time.Time
	decided bool
}

type proxyTimerKey struct{}

func parseUpstream(s string) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("--upstream is required (an http or https URL, such as http://127.0.0.1:3000)")
	}
	u, err := url.Parse(s)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL, which may hold a password
		}
		return nil, fmt.Errorf("--upstream: invalid URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--upstream %q is not an absolute http or https URL, such as http://127.0.0.1:3000", u.Redacted())
	}
	return u, nil
}

// newReverseProxy returns a proxy to upstream that keeps the method, path,
// query and body, streams responses as they come, and sets X-Forwarded-For,
// -Host and -Proto. The incoming X-Forwarded-For chain is kept, with the
// peer appended, only when the peer is one of the trusted proxies;
// otherwise X-Forwarded-For is the peer's address alone and X-Real-IP is
// dropped, since a client can write anything there. Forwarded is never
// passed on. A failing upstream is a 502 whose body does
// not name it.
func newReverseProxy(upstream *url.URL, trusted []netip.Prefix, log *slog.Logger) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			// Rewrite has already removed the X-Forwarded-* fields from
			// r.Out; SetXForwarded appends the peer to any chain left there.
			if policy.TrustedPeer(r.In, trusted) {
				if prior := r.In.Header["X-Forwarded-For"]; len(prior) > 0 {
					r.Out.Header["X-Forwarded-For"] = append([]string(nil), prior...)
				}
			} else {
				// An untrusted client's X-Real-IP is as made up as its
				// X-Forwarded-For. (Forwarded is always gone: Rewrite
				// removes it, and only X-Forwarded-For carries the chain.)
				r.Out.Header.Del("X-Real-Ip")
			}
			r.SetXForwarded()
		},
		FlushInterval: -1, // flush every write: server-sent events and chunked responses stream
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if b, ok := stalledBody(r); ok {
				// The client's upload stopped, or crawled below
				// --min-body-rate: the request is cut, as nginx does.
				log.Info("request body stalled: cut", "method", r.Method, "path", r.URL.Path, "read_bytes", b.read.Load())
				w.Header().Set("Connection", "close")
				httpjson.Error(w, http.StatusRequestTimeout, "REQUEST_TIMEOUT", "the request body stopped arriving")
				return
			}
			if r.Context().Err() != nil {
				// The client went away: nobody to answer.
				log.Debug("client gone before the upstream answered", "method", r.Method, "path", r.URL.Path, "error", err)
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			log.Warn("upstream unavailable", "method", r.Method, "path", r.URL.Path, "error", err)
			httpjson.Error(w, http.StatusBadGateway, "UPSTREAM_UNAVAILABLE", "the upstream service is unavailable; try again later")
		},
	}
}
