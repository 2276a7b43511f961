package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/internal/service/envoy"
)

// The defaults of the listener bounds, stated once: the flags' defaults
// and their help. Each bounds how long one client can hold a connection,
// a goroutine and a file descriptor without making progress.
const (
	// defaultHeaderTimeout bounds the request line and headers (nginx's
	// client_header_timeout is 60s). A client sends them in one write; 10s
	// leaves a slow network room and frees a silent connection six times
	// sooner than nginx.
	defaultHeaderTimeout = 10 * time.Second
	// defaultIdleTimeout is how long a keep-alive connection may wait for
	// its next request, and a gRPC connection without calls (nginx's
	// keepalive_timeout).
	defaultIdleTimeout = 75 * time.Second
	// defaultMaxHeaderBytes caps the request line and headers (nginx's
	// large_client_header_buffers, 4 of 8k); net/http answers 431 above
	// it. Go's own default is 1 MiB.
	defaultMaxHeaderBytes = 32 << 10
	// defaultMaxInflight caps the requests one listener works on at once.
	// A decision takes about a millisecond on Redis, so 1024 in flight is
	// a backlog of about a second at 25k decisions a second, a second
	// more than a healthy service has.
	defaultMaxInflight = 1024
	// defaultBodyTimeout is how long serve gives a request body, in all,
	// after its headers: a body is at most server.MaxBodyBytes (64 KiB)
	// of JSON, which any client sends in milliseconds.
	defaultBodyTimeout = 10 * time.Second
	// defaultBodyIdleTimeout is how long the proxy waits for the next byte
	// of a request body, or for a client to take a byte of its response
	// (nginx's client_body_timeout and send_timeout), with no bound on
	// the whole: uploads and streams may last as long as they move.
	defaultBodyIdleTimeout = 60 * time.Second
	// defaultMinBodyRate is the slowest average, in bytes a second, at
	// which the proxy keeps reading a request body once a
	// --body-idle-timeout of waiting has been used up (Kestrel's
	// MinRequestBodyDataRate is 240): a body trickled a byte at a time,
	// which no idle timeout catches, is cut.
	defaultMinBodyRate = 256
)

// Fixed bounds, not flags.
const (
	// writeGrace is how long serve may take over a request beyond its
	// body: the decision (the store's deadline is far shorter) and the
	// answer, a few hundred bytes.
	writeGrace = 10 * time.Second
	// busyRetryAfter is the Retry-After of a request refused at
	// --max-inflight: requests in flight usually finish within it.
	busyRetryAfter = time.Second
	// busyLogEvery is how often, at most, a listener logs the requests it
	// refused at --max-inflight.
	busyLogEvery = 10 * time.Second
	// grpcMinPingInterval is how often, at most, a gRPC client may ping;
	// a client pinging more often is sent GOAWAY (grpc-go's default, 5
	// minutes, would drop an Envoy configured with a shorter
	// connection_keepalive interval).
	grpcMinPingInterval = 10 * time.Second
	// grpcPingTimeout is how long the server waits for a ping's answer
	// before it closes the connection.
	grpcPingTimeout = 20 * time.Second
	// grpcStreamWorkers is how many long-lived goroutines serve gRPC
	// calls (grpc.NumStreamWorkers); a call finding none free gets a
	// goroutine of its own, as without them. A new goroutine per call
	// grows its stack anew on every call: with the memory store, 28% of
	// serve's CPU at 256 callers went to runtime.copystack (pprof), which
	// a worker's stack, grown once, saves. 256 covers the calls a busy
	// Envoy fleet keeps in flight on a replica waiting on Redis; each
	// idle worker holds only its stack.
	grpcStreamWorkers = 256
)

// listenFlags are the bounds every listener of serve and proxy puts on
// its connections and requests, as flags. body is the body timeout: for
// serve the whole body's (--body-timeout), for proxy the longest wait for
// progress (--body-idle-timeout, with --min-body-rate).
type listenFlags struct {
	header, idle, body *time.Duration
	headerBytes        *int
	inflight           *int
	minRate            *int // proxy only; nil for serve
	bodyFlag           string
}

// addListenFlags defines the bounds shared by serve and proxy on fs.
func addListenFlags(fs *cmdFlags) *listenFlags {
	l := &listenFlags{
		header:      fs.duration("header-timeout", "SLUICE_HEADER_TIMEOUT", defaultHeaderTimeout, "how long a client may take to send a request's line and headers; then the connection is closed"),
		idle:        fs.duration("idle-timeout", "SLUICE_IDLE_TIMEOUT", defaultIdleTimeout, "how long a keep-alive connection may wait for its next request (and a gRPC connection go without calls) before it is closed"),
		headerBytes: new(int),
		inflight:    new(int),
	}
	fs.intVar(l.headerBytes, "max-header-bytes", "SLUICE_MAX_HEADER_BYTES", defaultMaxHeaderBytes, "the largest request line and headers, in bytes; a larger one is answered 431")
	fs.intVar(l.inflight, "max-inflight", "SLUICE_MAX_INFLIGHT", defaultMaxInflight, "the most requests each listener works on at once; one more is answered 503 with Retry-After at once, not queued (gRPC: Unavailable; serve's /healthz, /readyz, /healthcheck, /metrics and gRPC health checks are not counted; 0: no cap)")
	return l
}

// addServeBodyFlag defines serve's --body-timeout on fs.
func (l *listenFlags) addServeBodyFlag(fs *cmdFlags) {
	l.bodyFlag = "--body-timeout"
	l.body = fs.duration("body-timeout", "SLUICE_BODY_TIMEOUT", defaultBodyTimeout, "how long a client may take to send a request body, in all, after its headers; then the request fails and the connection is closed")
}

// addProxyBodyFlags defines proxy's --body-idle-timeout and
// --min-body-rate on fs.
func (l *listenFlags) addProxyBodyFlags(fs *cmdFlags) {
	l.bodyFlag = "--body-idle-timeout"
	l.body = fs.duration("body-idle-timeout", "SLUICE_BODY_IDLE_TIMEOUT", defaultBodyIdleTimeout,
		"how long a request body may send nothing, or a client take nothing of its response, before the request is cut (408 when the answer has not begun); an upload or a stream that moves may last any time")
	l.minRate = new(int)
	fs.intVar(l.minRate, "min-body-rate", "SLUICE_MIN_BODY_RATE", defaultMinBodyRate,
		"the slowest average rate, in bytes a second, of a request body that has kept the proxy waiting longer than --body-idle-timeout in all; a slower body is cut (0: no minimum)")
}

// check refuses bounds that would turn a limit off or make no sense.
func (l *listenFlags) check() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--header-timeout", *l.header}, {"--idle-timeout", *l.idle}, {l.bodyFlag, *l.body}} {
		if d.v <= 0 {
			return fmt.Errorf("%s %v must be positive", d.name, d.v)
		}
	}
	if *l.headerBytes <= 0 {
		return fmt.Errorf("--max-header-bytes %d must be positive", *l.headerBytes)
	}
	if *l.inflight < 0 {
		return fmt.Errorf("--max-inflight %d is negative (0: no cap)", *l.inflight)
	}
	if l.minRate != nil && *l.minRate < 0 {
		return fmt.Errorf("--min-body-rate %d is negative (0: no minimum)", *l.minRate)
	}
	return nil
}

// serveServer returns serve's HTTP server for h: a whole-request read
// timeout (headers, then body), a write timeout, the keep-alive and header
// bounds, requests beyond --max-inflight refused unless exempt, and errors
// logged through log.
func (l *listenFlags) serveServer(h http.Handler, exempt func(*http.Request) bool, log *slog.Logger) *http.Server {
	srv := l.server(capInflight(h, *l.inflight, exempt, log), log)
	srv.ReadTimeout = *l.header + *l.body
	srv.WriteTimeout = *l.body + writeGrace
	return srv
}

// proxyServer returns the proxy's HTTP server for h: no bound on a
// request's or response's whole duration, so that uploads and streams
// last as long as they move, but a body that stalls or trickles is cut
// (see progress), besides the keep-alive, header and in-flight bounds.
func (l *listenFlags) proxyServer(h http.Handler, log *slog.Logger) *http.Server {
	return l.server(progress(capInflight(h, *l.inflight, nil, log), *l.body, *l.minRate), log)
}

// server returns an HTTP server for h with the bounds both commands share.
func (l *listenFlags) server(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: *l.header,
		IdleTimeout:       *l.idle,
		MaxHeaderBytes:    *l.headerBytes,
		// net/http's own lines (accept errors, TLS handshakes, panics) as
		// structured log lines.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// grpcServer returns serve's gRPC server: one request at most
// envoy.MaxRequestBytes, the handshake within --header-timeout, idle
// connections closed after --idle-timeout, pings enforced, and at most
// --max-inflight calls at once on the listener (and streams on one
// connection), one more refused with Unavailable; extra options follow.
func (l *listenFlags) grpcServer(log *slog.Logger, extra ...grpc.ServerOption) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(envoy.MaxRequestBytes),
		grpc.ConnectionTimeout(*l.header),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: *l.idle, Time: *l.idle, Timeout: grpcPingTimeout}),
		grpc.NumStreamWorkers(grpcStreamWorkers),
	}
	if n := *l.inflight; n > 0 {
		c := newInflight("grpc", n, log)
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(min(int64(n), math.MaxUint32))),
			grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
				if strings.HasPrefix(info.FullMethod, "/grpc.health.v1.Health/") {
					// Health checks answer whatever the load, as
					// serve's HTTP probes do.
					return next(ctx, req)
				}
				if !c.enter() {
					return nil, status.Errorf(codes.Unavailable, "the server is at its limit of %d calls in flight (--max-inflight); retry later", n)
				}
				defer c.leave()
				return next(ctx, req)
			}))
	}
	return grpc.NewServer(append(opts, extra...)...)
}

// inflight counts the requests one listener works on, up to its cap, and
// logs, at most every busyLogEvery, how many it refused.
type inflight struct {
	name    string // of the listener, for the log
	slots   chan struct{}
	log     *slog.Logger
	refused atomic.Int64 // since the last log line
	mu      sync.Mutex
	logged  time.Time
}

// newInflight returns the count of listener name (http or grpc), for a
// cap of n.
func newInflight(name string, n int, log *slog.Logger) *inflight {
	return &inflight{name: name, slots: make(chan struct{}, n), log: log}
}

// enter takes a slot, or reports false at once when none is free.
func (c *inflight) enter() bool {
	select {
	case c.slots <- struct{}{}:
		return true
	default:
	}
	c.refused.Add(1)
	c.mu.Lock()
	if now := time.Now(); now.Sub(c.logged) >= busyLogEvery {
		c.logged = now
		c.log.Warn("requests refused at --max-inflight", "listener", c.name, "max_inflight", cap(c.slots), "refused", c.refused.Swap(0))
	}
	c.mu.Unlock()
	return false
}

// leave frees the slot that enter took.
func (c *inflight) leave() { <-c.slots }

// capInflight serves at most n requests of h at once (0: any number);
// one more is answered 503 with Retry-After at once, and exempt requests
// (nil: none) are served whatever the count.
func capInflight(h http.Handler, n int, exempt func(*http.Request) bool, log *slog.Logger) http.Handler {
	if n <= 0 {
		return h
	}
	c := newInflight("http", n, log)
	retry := strconv.Itoa(int(busyRetryAfter / time.Second))
	msg := fmt.Sprintf("the server is at its limit of %d requests in flight; retry later", n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if exempt == nil || !exempt(r) {
			if !c.enter() {
				w.Header().Set("Retry-After", retry)
				// And close the connection at once: a server at its cap
				// spends nothing on the refused request's body, which
				// net/http would otherwise read to its end, however
				// slowly it comes, before letting go of the connection.
				w.Header().Set("Connection", "close")
				_ = http.NewResponseController(w).SetReadDeadline(time.Now())
				httpjson.Error(w, http.StatusServiceUnavailable, "SERVER_BUSY", msg)
				return
			}
			defer c.leave()
		}
		h.ServeHTTP(w, r)
	})
}

// progress cuts a request through h whose body stalls or trickles, or
// whose client stops taking its response, with no bound on how long a
// request that moves may last. Before each read of the body the
// connection's read deadline is set to idle from now, or sooner: to when
// the body will have kept the server waiting idle plus one second per
// minRate bytes it has sent (minRate 0: no such bound); once the whole
// body is in, net/http clears the read deadline to watch for the client
// going away. Before each write
// of the response the write deadline is set to idle from now. Once h
// returns, both are idle from now, for what net/http still reads (the rest
// of a small body) and writes (the end of the response).
func progress(h http.Handler, idle time.Duration, minRate int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body != nil && r.Body != http.NoBody {
			b := &progressBody{ReadCloser: r.Body, rc: rc, idle: idle, minRate: minRate}
			r = r.WithContext(context.WithValue(r.Context(), progressKey{}, b))
			r.Body = b
		}
		h.ServeHTTP(&progressWriter{ResponseWriter: w, rc: rc, idle: idle}, r)
		now := time.Now()
		_ = rc.SetReadDeadline(now.Add(idle))
		_ = rc.SetWriteDeadline(now.Add(idle))
	})
}

// progressBody is a request body that sets the connection's read deadline
// before each read (see progress). Reads come from one goroutine at a
// time.
type progressBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	idle    time.Duration
	minRate int
	read    atomic.Int64  // bytes so far
	waited  time.Duration // time spent in Read so far
	cut     atomic.Bool   // a read failed after its deadline
}

func (b *progressBody) Read(p []byte) (int, error) {
	start := time.Now()
	wait := b.idle
	if b.minRate > 0 {
		// The client may have kept the server waiting idle, plus a second
		// for every minRate bytes it sent.
		budget := b.idle + time.Duration(float64(b.read.Load())/float64(b.minRate)*float64(time.Second)) - b.waited
		wait = max(min(wait, budget), 0)
	}
	_ = b.rc.SetReadDeadline(start.Add(wait))
	n, err := b.ReadCloser.Read(p)
	b.read.Add(int64(n))
	b.waited += time.Since(start)
	if err != nil && err != io.EOF && !time.Now().Before(start.Add(wait)) {
		b.cut.Store(true)
	}
	return n, err
}

// progressKey is the context key of a request's progressBody.
type progressKey struct{}

// stalledBody returns the body of r, or of the request r was made from
// (its context carries the body), when progress cut it.
func stalledBody(r *http.Request) (*progressBody, bool) {
	b, ok := r.Context().Value(progressKey{}).(*progressBody)
	return b, ok && b.cut.Load()
}

// progressWriter is a ResponseWriter that sets the connection's write
// deadline before each write and flush (see progress).
type progressWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
}

func (w *progressWriter) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.idle)) }

func (w *progressWriter) WriteHeader(code int) { w.extend(); w.ResponseWriter.WriteHeader(code) }

func (w *progressWriter) Write(p []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(p)
}

// FlushError flushes the response, for http.ResponseController (and so
// httputil.ReverseProxy).
func (w *progressWriter) FlushError() error {
	w.extend()
	return w.rc.Flush()
}

// Unwrap returns the ResponseWriter underneath, for
// http.ResponseController.
func (w *progressWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
