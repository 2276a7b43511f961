package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
)

// demoFlags are the demo's knobs.
type demoFlags struct {
	replicas, limit, requests, concurrency int
	algorithm, redisURL                    string
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("demo", "Show on loopback why a rate limiter needs a shared store: N replicas of a\n"+
		"rate-limiting proxy behind a round-robin balancer, one client over the limit,\n"+
		"first with each replica's in-memory store, then with one Redis. Without\n"+
		"SLUICE_REDIS_URL it starts redis-server from PATH on a free port and stops it\n"+
		"afterwards.", stdout)
	var d demoFlags
	fs.intVar(&d.replicas, "replicas", "SLUICE_DEMO_REPLICAS", 3, "replicas behind the balancer (1 to 16)")
	fs.intVar(&d.limit, "limit", "SLUICE_DEMO_LIMIT", 10, "requests the policy admits per minute (1 to 1000)")
	fs.intVar(&d.requests, "requests", "SLUICE_DEMO_REQUESTS", 0, "requests the client sends (0: 2 x limit x replicas)")
	fs.intVar(&d.concurrency, "concurrency", "SLUICE_DEMO_CONCURRENCY", 8, "requests in flight at once (1 to 64)")
	fs.stringVar(&d.algorithm, "algorithm", "SLUICE_DEMO_ALGORITHM", string(sluice.TokenBucket), "algorithm: "+algorithmNames())
	fs.stringVar(&d.redisURL, "redis", "SLUICE_REDIS_URL", "", "Redis URL (empty: start redis-server from PATH for the demo)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := d.check(); err != nil {
		return usageError{err}
	}
	rules, err := d.rules()
	if err != nil {
		return err
	}
	run, cancel := context.WithTimeout(ctx, demoTimeout) // a demo never hangs
	defer cancel()
	err = d.show(run, stdout, rules)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errors.New("interrupted")
	case errors.Is(run.Err(), context.DeadlineExceeded):
		return fmt.Errorf("the demo took over %v: lower --requests or raise --concurrency", demoTimeout)
	}
	return err
}

// demoTimeout bounds a demo.
const demoTimeout = time.Minute

// windowMargin is how much of the current minute a demo of a window
// algorithm needs left, so that no window ends during it.
const windowMargin = 10 * time.Second

// show runs the demo and prints its table.
func (d *demoFlags) show(ctx context.Context, stdout io.Writer, rules []policy.Rule) error {
	upstream, err := listenLocal(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	}))
	if err != nil {
		return err
	}
	defer upstream.close()

	fmt.Fprintf(stdout, "sluice demo: %d replicas of a rate-limiting proxy behind a round-robin balancer,\n", d.replicas)
	fmt.Fprintf(stdout, "one client sending %d requests (%d at a time) with one API key; the policy\n", d.requests, d.concurrency)
	fmt.Fprintf(stdout, "admits %d per minute (%s). Everything listens on 127.0.0.1.\n\n", d.limit, d.algorithm)
	if err := d.awaitWindow(ctx, stdout); err != nil {
		return err
	}
	d.header(stdout)

	mem, err := d.run(ctx, upstream.url, rules, func() (sluice.Store, func(), error) {
		return memory.New(), func() {}, nil
	})
	if err != nil {
		return err
	}
	d.row(stdout, "in-memory", mem)

	redisURL, stopRedis, note, err := d.redis(ctx)
	if err != nil {
		d.summary(stdout, mem, nil, "")
		return err
	}
	prefix := "sluice-demo-" + randomHex() // a fresh count, whatever the server holds
	rs, err := d.run(ctx, upstream.url, rules, func() (sluice.Store, func(), error) {
		s, err := redis.Open(redisURL, redis.WithPrefix(prefix))
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	})
	stopRedis()
	if err != nil {
		d.summary(stdout, mem, nil, "")
		return err
	}
	d.row(stdout, "redis", rs)
	d.summary(stdout, mem, rs, note)
	return nil
}

// awaitWindow waits for the next minute when the algorithm counts in
// windows aligned to the clock and less than windowMargin is left of the
// current one: a window that ended during the demo would admit a second
// limit and blur the story.
func (d *demoFlags) awaitWindow(ctx context.Context, w io.Writer) error {
	if a := sluice.Algorithm(d.algorithm); a != sluice.FixedWindow && a != sluice.SlidingWindow {
		return nil
	}
	left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute
	if left > windowMargin {
		return nil
	}
	fmt.Fprintf(w, "(waiting %.1fs for the next minute, so that no %s window ends during the demo)\n\n", left.Seconds(), d.algorithm)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(left + 10*time.Millisecond):
		return nil
	}
}

// header writes the table's header.
func (d *demoFlags) header(w io.Writer) {
	fmt.Fprintf(w, "%-10s", "store")
	for i := range d.replicas {
		fmt.Fprintf(w, " %10s", fmt.Sprintf("replica %d", i+1))
	}
	fmt.Fprintf(w, " %9s %6s\n", "admitted", "limit")
}

// row writes one line of the table.
func (d *demoFlags) row(w io.Writer, store string, admitted []int64) {
	fmt.Fprintf(w, "%-10s", store)
	for _, n := range admitted {
		fmt.Fprintf(w, " %10d", n)
	}
	fmt.Fprintf(w, " %9d %6d\n", sum(admitted), d.limit)
}

// summary says what the numbers mean; rs is nil when the Redis half did
// not run.
func (d *demoFlags) summary(w io.Writer, mem, rs []int64, note string) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "in-memory: each replica counts alone: %s\n", d.verdict(sum(mem)))
	if rs != nil {
		fmt.Fprintf(w, "redis:     one count in Redis, one atomic script per decision: %s\n", d.verdict(sum(rs)))
		fmt.Fprint(w, note)
	}
}

// verdict compares admitted with the limit.
func (d *demoFlags) verdict(admitted int64) string {
	switch limit := int64(d.limit); {
	case admitted == limit:
		return "exactly the limit."
	case admitted == limit*int64(d.replicas):
		return fmt.Sprintf("%d x the limit, a whole limit per replica.", d.replicas)
	case admitted > limit && d.requests < d.limit*d.replicas:
		return fmt.Sprintf("%.1f x the limit (each replica received fewer than %d requests).", float64(admitted)/float64(limit), d.limit)
	case admitted > limit:
		return fmt.Sprintf("%.1f x the limit (a %s limit may also refill during the run).", float64(admitted)/float64(limit), d.algorithm)
	default:
		return "less than the limit: the client sent too few requests to exhaust it."
	}
}

// check validates the flags.
func (d *demoFlags) check() error {
	switch {
	case d.replicas < 1 || d.replicas > 16:
		return fmt.Errorf("--replicas %d is not between 1 and 16", d.replicas)
	case d.limit < 1 || d.limit > 1000:
		return fmt.Errorf("--limit %d is not between 1 and 1000", d.limit)
	case d.concurrency < 1 || d.concurrency > 64:
		return fmt.Errorf("--concurrency %d is not between 1 and 64", d.concurrency)
	case d.requests < 0 || d.requests > 100000:
		return fmt.Errorf("--requests %d is not between 0 and 100000", d.requests)
	}
	if _, err := sluice.ParseAlgorithm(d.algorithm); err != nil {
		return fmt.Errorf("--algorithm: %w", err)
	}
	if d.redisURL != "" {
		if err := redis.CheckURL(d.redisURL); err != nil {
			return fmt.Errorf("--redis: %w", err)
		}
	}
	if d.requests == 0 {
		d.requests = 2 * d.limit * d.replicas
	}
	return nil
}

// rules is the demo's policy: one rule, keyed by API key.
func (d *demoFlags) rules() ([]policy.Rule, error) {
	f, err := config.Parse("demo.yaml", fmt.Appendf(nil, `rules:
  - name: demo
    match: /
    key: header:X-API-Key
    algorithm: %s
    limit: %d
    period: 1m
`, d.algorithm, d.limit))
	if err != nil {
		return nil, err
	}
	return f.Rules, nil
}

// run starts the replicas, each deciding with its own store from
// newStore, behind a round-robin balancer, sends the client's requests
// through it, and returns how many each replica admitted.
func (d *demoFlags) run(ctx context.Context, upstream *url.URL, rules []policy.Rule, newStore func() (sluice.Store, func(), error)) ([]int64, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	admitted := make([]atomic.Int64, d.replicas)
	var backends []*url.URL
	for i := range d.replicas {
		store, closeStore, err := newStore()
		if err != nil {
			return nil, err
		}
		defer closeStore()
		forward := newReverseProxy(upstream, nil, quiet) // what sluice proxy forwards with
		counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			admitted[i].Add(1) // the limiter let it through
			forward.ServeHTTP(w, r)
		})
		// The demo's own Limiter per replica: ReturnErrors, so that a
		// failing Redis shows as errors rather than as a policy's guess.
		set, err := policy.Compile(rules)
		if err != nil {
			return nil, err
		}
		h := httplimit.New(policy.New(sluice.New(store), set, policy.WithLogger(quiet)))(counted)
		srv, err := listenLocal(h)
		if err != nil {
			return nil, err
		}
		defer srv.close()
		backends = append(backends, srv.url)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	defer transport.CloseIdleConnections() // after the balancer closes
	balancer, err := listenLocal(roundRobin(backends, transport))
	if err != nil {
		return nil, err
	}
	defer balancer.close()
	codes, err := d.fire(ctx, balancer.url.String())
	if err != nil {
		return nil, err
	}
	if other := d.requests - codes[http.StatusOK] - codes[http.StatusTooManyRequests]; other > 0 {
		return nil, fmt.Errorf("%d of %d requests got neither 200 nor 429 (status counts %v): is the store reachable?", other, d.requests, codes)
	}
	out := make([]int64, d.replicas)
	for i := range admitted {
		out[i] = admitted[i].Load()
	}
	return out, nil
}

// fire sends the client's requests to url, concurrency at a time, and
// counts the status codes.
func (d *demoFlags) fire(ctx context.Context, url string) (map[int]int, error) {
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: d.concurrency},
	}
	defer client.CloseIdleConnections()
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		first error
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for range d.concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(d.requests) && ctx.Err() == nil {
				code, err := get(ctx, client, url)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return codes, first
}

// get sends one request with the demo's API key and returns the status.
func get(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/hello", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-API-Key", "demo-client")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// roundRobin proxies each request to the next backend in turn, like a load
// balancer's round-robin upstream, over transport (whose idle connections
// the caller closes).
func roundRobin(backends []*url.URL, transport http.RoundTripper) http.Handler {
	proxies := make([]*httputil.ReverseProxy, len(backends))
	for i, b := range backends {
		proxies[i] = httputil.NewSingleHostReverseProxy(b)
		proxies[i].Transport = transport
	}
	var next atomic.Uint64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxies[(next.Add(1)-1)%uint64(len(proxies))].ServeHTTP(w, r)
	})
}

func sum(ns []int64) int64 {
	var t int64
	for _, n := range ns {
		t += n
	}
	return t
}

// local is an HTTP server on a free loopback port.
type local struct {
	url *url.URL
	srv *http.Server
}

// listenLocal serves h on a free loopback port.
func listenLocal(h http.Handler) (*local, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &local{url: &url.URL{Scheme: "http", Host: ln.Addr().String()}, srv: srv}, nil
}

func (l *local) close() { _ = l.srv.Close() }

// redis returns the URL of the Redis to use: --redis, or else a
// redis-server from PATH started on a free port (stop stops it). note says
// which, for the reader.
func (d *demoFlags) redis(ctx context.Context) (url string, stop func(), note string, err error) {
	if d.redisURL != "" {
		return d.redisURL, func() {}, "           (the server of --redis or SLUICE_REDIS_URL, under a fresh key prefix)\n", nil
	}
	srv, err := startRedis(ctx, os.TempDir())
	if err != nil {
		return "", nil, "", err
	}
	note = fmt.Sprintf("           (redis-server %s from PATH, started for the demo on %s as pid %d, now stopped)\n", srv.version, srv.Addr, srv.Pid())
	return "redis://" + srv.Addr, srv.Stop, note, nil
}

// algorithmNames lists the algorithms for a flag's help.
func algorithmNames() string {
	names := make([]string, len(sluice.Algorithms))
	for i, a := range sluice.Algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// randomHex returns 8 random hex digits.
func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errNoRedis says how to get a Redis for the demo's second half.
var errNoRedis = errors.New(`no redis-server in PATH for the Redis half of the demo. Install one
  (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis)
or point the demo at a server: SLUICE_REDIS_URL=redis://127.0.0.1:6379 sluice demo`)
