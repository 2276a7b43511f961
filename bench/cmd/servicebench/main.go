// Command servicebench measures `sluice serve` beside its peers, all
// driven by one load client (sluice's internal/loadgen, as `sluice bench`)
// on loopback, and writes the figures as JSON for BENCHMARKS.md:
//
//	cd bench && go run ./cmd/servicebench -out results/service.json
//
// It starts one redis-server, then one server at a time: an empty gRPC
// server answering ShouldRateLimit OK, sluice serve (built from this
// checkout) with an envoyproxy/ratelimit config on the memory store and
// on the Redis, envoyproxy/ratelimit's service_cmd on the same Redis
// (by default, and in its best setting, REDIS_PIPELINE_WINDOW=500us),
// gubernator on one node (in memory: it has no Redis store), an empty
// net/http handler, and sluice serve's POST /v1/check with a policy file
// on the memory store and on the Redis. Each is driven at 256 callers
// and at 1, for a bounded time, and its CPU per decision read from
// /proc/<pid>/stat, Redis's likewise. envoyproxy/ratelimit and
// gubernator are installed with go install into sluice's cache
// directory (~/.cache/sluice, as `make upstream`), never into the
// repository. Every process is stopped by its pid; every load is bounded.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/internal/service/loadgen"
	"github.com/sluice-go/sluice/internal/testing/redisproc"
)

// The peers' versions, as the issue names them.
const (
	ratelimitPkg     = "github.com/envoyproxy/ratelimit/src/service_cmd"
	ratelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"
	gubernatorPkg    = "github.com/gubernator-io/gubernator/v2/cmd/gubernator"
	gubernatorVer    = "v2.13.0"
)

// The load: every call admitted (a limit far above what a key sees),
// keys in turn.
const (
	domain       = "bench"
	descriptor   = "remote_address"
	limitPerSec  = 1000000
	callTimeout  = 10 * time.Second
	readyTimeout = 90 * time.Second
)

// flags are the program's settings.
type flags struct {
	out, only           string
	profiles            string
	callers, keys       int
	duration, duration1 time.Duration
	warmup              time.Duration
	profile             time.Duration
}

func main() {
	var f flags
	empty := flag.String("empty", "", "internal: serve the empty grpc or http server on -listen")
	listen := flag.String("listen", "", "internal: the empty server's address")
	flag.StringVar(&f.out, "out", "results/service.json", "where to write the results (JSON)")
	flag.StringVar(&f.only, "only", "", "run only these scenarios, comma-separated ("+strings.Join(scenarioIDs(), ", ")+"; empty: all)")
	flag.IntVar(&f.callers, "callers", 256, "callers of the concurrent runs")
	flag.IntVar(&f.keys, "keys", 1000, "distinct keys, used in turn")
	flag.DurationVar(&f.duration, "duration", 8*time.Second, "how long each concurrent run sends")
	flag.DurationVar(&f.duration1, "duration1", 4*time.Second, "how long each one-caller run sends")
	flag.DurationVar(&f.warmup, "warmup", time.Second, "how long each server is driven before it is measured")
	flag.DurationVar(&f.profile, "profile", 3*time.Second, "how long sluice serve is profiled (pprof CPU) at each number of callers, after it is measured (0: not)")
	flag.StringVar(&f.profiles, "profiles", "", "a directory to keep sluice serve's CPU profiles in, such as results/tmp (git ignores it; empty: not kept)")
	flag.Parse()
	if *empty != "" {
		if err := serveEmpty(*empty, *listen); err != nil {
			fmt.Fprintln(os.Stderr, "servicebench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "servicebench:", err)
		os.Exit(1)
	}
}

// env is what the scenarios share: the binaries, the Redis, the
// configuration files and a scratch directory.
type env struct {
	f                     flags
	tmp                   string
	sluice, ratelimit     string
	gubernator            string
	redis                 *redisproc.Process
	envoyFile, policyFile string
	ratelimitRoot         string
}

func run(ctx context.Context, f flags) error {
	if f.callers < 1 || f.keys < 1 || f.keys > loadgen.MaxIPKeys || f.duration <= 0 || f.duration1 <= 0 || f.warmup < 0 || f.profile < 0 {
		return errors.New("-callers and -keys must be positive (keys at most 2^24), -duration and -duration1 positive, -warmup and -profile not negative")
	}
	chosen, err := chooseScenarios(f.only)
	if err != nil {
		return err
	}
	began := time.Now()
	tmp, err := os.MkdirTemp("", "servicebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{f: f, tmp: tmp}
	cache, err := cacheDir()
	if err != nil {
		return err
	}
	root, err := sluiceRoot()
	if err != nil {
		return err
	}
	if e.sluice, err = buildSluice(ctx, root, tmp); err != nil {
		return err
	}
	if needs(chosen, "ratelimit") {
		if e.ratelimit, err = install(ctx, filepath.Join(cache, "ratelimit-"+ratelimitVersion), ratelimitPkg, ratelimitVersion, "service_cmd"); err != nil {
			return err
		}
	}
	if needs(chosen, "gubernator") {
		if e.gubernator, err = install(ctx, filepath.Join(cache, "gubernator-"+gubernatorVer), gubernatorPkg, gubernatorVer, "gubernator"); err != nil {
			return err
		}
	}
	if err := e.writeConfigs(); err != nil {
		return err
	}
	redisPath, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server is not in PATH (sudo apt-get install -y redis-server): %w", err)
	}
	if e.redis, err = redisproc.StartFree(ctx, redisPath, tmp, ""); err != nil {
		return err
	}
	defer e.redis.Stop()
	var (
		results []*scenarioResult
		failed  []string
	)
	for _, sc := range chosen {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "%s (%s) ...\n", sc.title, sc.setting)
		r, err := e.measure(ctx, sc)
		if err != nil {
			// The others are still worth having; the results say so.
			fmt.Fprintf(os.Stderr, "  failed: %v\n", err)
			failed = append(failed, fmt.Sprintf("%s (%s) failed: %s", sc.title, sc.setting, firstLine(err.Error())))
			continue
		}
		results = append(results, r)
	}
	rep := report(e, results, time.Since(began))
	rep.Notes = append(rep.Notes, failed...)
	if err := os.MkdirAll(filepath.Dir(f.out), 0o755); err != nil {
		return err
	}
	if err := rep.Write(f.out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s in %s\n", f.out, time.Since(began).Round(time.Second))
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d scenarios failed", len(failed), len(chosen))
	}
	return nil
}

// writeConfigs writes the envoyproxy/ratelimit config (for it and for
// sluice serve alike) and the sluice policy file of the HTTP runs.
func (e *env) writeConfigs() error {
	e.ratelimitRoot = filepath.Join(e.tmp, "runtime")
	dir := filepath.Join(e.ratelimitRoot, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	e.envoyFile = filepath.Join(dir, "bench.yaml")
	envoyYAML := fmt.Sprintf("domain: %s\ndescriptors:\n  - key: %s\n    rate_limit:\n      unit: second\n      requests_per_unit: %d\n", domain, descriptor, limitPerSec)
	if err := os.WriteFile(e.envoyFile, []byte(envoyYAML), 0o644); err != nil {
		return err
	}
	e.policyFile = filepath.Join(e.tmp, "sluice.yaml")
	policyYAML := fmt.Sprintf("rules:\n  - {name: %s, key: ip, algorithm: fixed_window, limit: %d, period: 1s}\n", domain, limitPerSec)
	return os.WriteFile(e.policyFile, []byte(policyYAML), 0o644)
}

// server is one started server: its process, the Func of one decision,
// its pprof address (sluice serve only) and how to let go of its client.
type server struct {
	proc  *process
	fn    loadgen.Func
	pprof string
	close func()
}

// scenario is one server to measure.
type scenario struct {
	id, title string
	door      string // "grpc" or "http"
	store     string // "memory", "redis", or "-" for none
	setting   string // the peer's setting, for the table
	start     func(ctx context.Context, e *env) (*server, error)
}

// scenarios lists every server, in the order they run.
var scenarios = []scenario{
	{"empty-grpc", "empty gRPC server", "grpc", "-", "ShouldRateLimit answers OK", startEmptyGRPC},
	{"sluice-grpc-memory", "sluice serve (gRPC, memory)", "grpc", "memory", "envoyproxy/ratelimit config", sluiceGRPC(false)},
	{"sluice-grpc-redis", "sluice serve (gRPC, Redis)", "grpc", "redis", "envoyproxy/ratelimit config", sluiceGRPC(true)},
	{"ratelimit-default", "envoyproxy/ratelimit", "grpc", "redis", "defaults (REDIS_PIPELINE_WINDOW=0)", startRatelimit(nil)},
	{"ratelimit-best", "envoyproxy/ratelimit", "grpc", "redis", "REDIS_PIPELINE_WINDOW=500us", startRatelimit([]string{"REDIS_PIPELINE_WINDOW=500us"})},
	{"gubernator", "gubernator v2.13.0 (1 node)", "grpc", "memory", "GetRateLimits, token bucket", startGubernator},
	{"empty-http", "empty net/http handler", "http", "-", "answers 200", startEmptyHTTP},
	{"sluice-http-memory", "sluice serve (POST /v1/check, memory)", "http", "memory", "policy file", sluiceHTTP(false)},
	{"sluice-http-redis", "sluice serve (POST /v1/check, Redis)", "http", "redis", "policy file", sluiceHTTP(true)},
}

func scenarioIDs() []string {
	ids := make([]string, len(scenarios))
	for i, s := range scenarios {
		ids[i] = s.id
	}
	return ids
}

// chooseScenarios returns the scenarios -only names, all for "".
func chooseScenarios(only string) ([]scenario, error) {
	if only == "" {
		return scenarios, nil
	}
	var out []scenario
	for id := range strings.SplitSeq(only, ",") {
		found := false
		for _, s := range scenarios {
			if s.id == strings.TrimSpace(id) {
				out, found = append(out, s), true
			}
		}
		if !found {
			return nil, fmt.Errorf("-only: no scenario %q (%s)", id, strings.Join(scenarioIDs(), ", "))
		}
	}
	return out, nil
}

// needs reports whether a chosen scenario's id starts with prefix.
func needs(chosen []scenario, prefix string) bool {
	for _, s := range chosen {
		if strings.HasPrefix(s.id, prefix) {
			return true
		}
	}
	return false
}

// grpcTarget returns the ShouldRateLimit Func of a server at addr.
func grpcTarget(addr string, keys int) (loadgen.Func, func(), error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	fn := loadgen.GRPC(conn, domain, []loadgen.Entry{{Key: descriptor, Value: loadgen.ParseTemplate("{ip}")}}, keys, callTimeout)
	return fn, func() { conn.Close() }, nil
}

// grpcServer is the server of process p, answering ShouldRateLimit at
// addr (pprof: its pprof address, "" for none). It stops p when it cannot
// make the client.
func grpcServer(p *process, addr, pprof string, keys int) (*server, error) {
	fn, closeFn, err := grpcTarget(addr, keys)
	if err != nil {
		p.stop()
		return nil, err
	}
	return &server{proc: p, fn: fn, pprof: pprof, close: closeFn}, nil
}

// httpTarget returns the POST /v1/check Func of a server at addr.
func httpTarget(addr string, callers, keys int) (loadgen.Func, func()) {
	tr := &http.Transport{MaxIdleConns: callers, MaxIdleConnsPerHost: callers, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: tr, Timeout: callTimeout}
	return loadgen.HTTPCheck(client, "http://"+addr, domain, loadgen.ParseTemplate("{ip}"), keys), tr.CloseIdleConnections
}

func startEmptyGRPC(_ context.Context, e *env) (*server, error) {
	p, addr, err := startEmpty("grpc")
	if err != nil {
		return nil, err
	}
	return grpcServer(p, addr, "", e.f.keys)
}

func startEmptyHTTP(_ context.Context, e *env) (*server, error) {
	p, addr, err := startEmpty("http")
	if err != nil {
		return nil, err
	}
	fn, closeFn := httpTarget(addr, e.f.callers, e.f.keys)
	return &server{proc: p, fn: fn, close: closeFn}, nil
}

// startSluice starts sluice serve with config, on the Redis or the
// memory store, with a pprof listener, and returns it with its HTTP and
// gRPC addresses.
func startSluice(e *env, config string, redis bool) (p *process, httpAddr, grpcAddr, pprofAddr string, err error) {
	addrs, err := freeAddrs(3)
	if err != nil {
		return nil, "", "", "", err
	}
	args := []string{"serve", "--config", config, "--listen", addrs[0], "--grpc-listen", addrs[1], "--pprof-listen", addrs[2],
		"--log-format", "json", "--reload-interval", "0"}
	if redis {
		args = append(args, "--redis", "redis://"+e.redis.Addr)
	}
	p, err = start("sluice serve", e.sluice, args, nil)
	return p, addrs[0], addrs[1], addrs[2], err
}

func sluiceGRPC(redis bool) func(context.Context, *env) (*server, error) {
	return func(_ context.Context, e *env) (*server, error) {
		p, _, grpcAddr, pprofAddr, err := startSluice(e, e.envoyFile, redis)
		if err != nil {
			return nil, err
		}
		return grpcServer(p, grpcAddr, pprofAddr, e.f.keys)
	}
}

func sluiceHTTP(redis bool) func(context.Context, *env) (*server, error) {
	return func(_ context.Context, e *env) (*server, error) {
		p, httpAddr, _, pprofAddr, err := startSluice(e, e.policyFile, redis)
		if err != nil {
			return nil, err
		}
		fn, closeFn := httpTarget(httpAddr, e.f.callers, e.f.keys)
		return &server{proc: p, fn: fn, pprof: pprofAddr, close: closeFn}, nil
	}
}

// startRatelimit returns the start of envoyproxy/ratelimit's service_cmd
// on the Redis, serving the bench config, with settings added.
func startRatelimit(settings []string) func(context.Context, *env) (*server, error) {
	return func(_ context.Context, e *env) (*server, error) {
		addrs, err := freeAddrs(3)
		if err != nil {
			return nil, err
		}
		port := func(a string) string { return a[strings.LastIndexByte(a, ':')+1:] }
		vars := append([]string{
			"HOST=127.0.0.1", "PORT=" + port(addrs[0]), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(addrs[1]),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + port(addrs[2]),
			"USE_STATSD=false", "LOG_LEVEL=warn",
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + e.redis.Addr,
			"RUNTIME_ROOT=" + e.ratelimitRoot, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
			"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		}, settings...)
		p, err := start("envoyproxy/ratelimit", e.ratelimit, nil, vars)
		if err != nil {
			return nil, err
		}
		return grpcServer(p, addrs[1], "", e.f.keys)
	}
}

// startGubernator starts gubernator as a cluster of one: memberlist on
// loopback with no other node known.
func startGubernator(_ context.Context, e *env) (*server, error) {
	addrs, err := freeAddrs(3)
	if err != nil {
		return nil, err
	}
	vars := []string{
		"GUBER_GRPC_ADDRESS=" + addrs[0], "GUBER_HTTP_ADDRESS=" + addrs[1], "GUBER_ADVERTISE_ADDRESS=" + addrs[0],
		"GUBER_PEER_DISCOVERY_TYPE=member-list", "GUBER_MEMBERLIST_ADDRESS=" + addrs[2], "GUBER_MEMBERLIST_BIND_ADDRESS=" + addrs[2],
		"GUBER_MEMBERLIST_KNOWN_NODES=" + addrs[2], // itself: a cluster of one
		"GUBER_LOG_LEVEL=error",
	}
	p, err := start("gubernator", e.gubernator, nil, vars)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.stop()
		return nil, err
	}
	fn := gubernatorFunc(conn, loadgen.ParseTemplate("{ip}"), e.f.keys, limitPerSec, time.Second, callTimeout)
	return &server{proc: p, fn: fn, close: func() { conn.Close() }}, nil
}

// run is one measured run: at a number of callers, what the load saw and
// the CPU the server and Redis used.
type runResult struct {
	callers    int
	res        *loadgen.Result
	serverCPU  float64        // seconds
	redisCPU   float64        // seconds
	profile    *profileShares // sluice serve only, when profiled
	profileErr error
}

// scenarioResult is a scenario's runs.
type scenarioResult struct {
	sc   scenario
	runs []*runResult
}

// run returns the run at callers whose id is id, or nil.
func (r *scenarioResult) run(callers int) *runResult {
	for _, x := range r.runs {
		if x.callers == callers {
			return x
		}
	}
	return nil
}

// measure starts sc's server, waits until it answers, warms it, measures
// it at -callers and at 1 caller (and profiles sluice serve), and stops it.
func (e *env) measure(ctx context.Context, sc scenario) (*scenarioResult, error) {
	srv, err := sc.start(ctx, e)
	if err != nil {
		return nil, err
	}
	defer func() {
		srv.close()
		srv.proc.stop()
	}()
	if err := waitReady(ctx, srv); err != nil {
		return nil, err
	}
	if e.f.warmup > 0 {
		loadgen.Run(ctx, loadgen.Options{Concurrency: e.f.callers, Duration: e.f.warmup, Keys: e.f.keys}, srv.fn)
	}
	out := &scenarioResult{sc: sc}
	for _, callers := range []int{e.f.callers, 1} {
		d := e.f.duration
		if callers == 1 {
			d = e.f.duration1
		}
		s0, err1 := cpuSeconds(srv.proc.pid())
		r0, err2 := cpuSeconds(e.redis.Pid())
		res := loadgen.Run(ctx, loadgen.Options{Concurrency: callers, Duration: d, Keys: e.f.keys}, srv.fn)
		s1, err3 := cpuSeconds(srv.proc.pid())
		r1, err4 := cpuSeconds(e.redis.Pid())
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if res.Errors > 0 {
			return nil, fmt.Errorf("%d callers: %d of %d requests failed; the first: %v\n%s", callers, res.Errors, res.Sent, res.FirstErr, srv.proc.out.String())
		}
		rr := &runResult{callers: callers, res: res, serverCPU: s1 - s0, redisCPU: r1 - r0}
		fmt.Fprintf(os.Stderr, "  %3d callers: %8.0f decisions/s  p50 %-9s p99 %-9s server %.1f µs/decision  Redis %.1f µs/decision\n",
			callers, res.PerSecond(), res.Quantile(0.5).Round(time.Microsecond), res.Quantile(0.99).Round(time.Microsecond),
			perDecision(rr.serverCPU, res), perDecision(rr.redisCPU, res))
		if srv.pprof != "" && e.f.profile > 0 {
			rr.profile, rr.profileErr = e.profile(ctx, srv, sc, callers)
		}
		out.runs = append(out.runs, rr)
	}
	return out, nil
}

// profile drives srv at callers while its CPU profile of -profile is
// taken, and returns the profile's shares.
func (e *env) profile(ctx context.Context, srv *server, sc scenario, callers int) (*profileShares, error) {
	seconds := max(int(e.f.profile.Round(time.Second)/time.Second), 1)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Bounded: until the profile is in, at most its length and a minute.
		loadgen.Run(lctx, loadgen.Options{Concurrency: callers, Duration: time.Duration(seconds)*time.Second + time.Minute, Keys: e.f.keys}, srv.fn)
	}()
	dir := e.tmp
	if e.f.profiles != "" {
		dir = e.f.profiles
		if err := os.MkdirAll(dir, 0o755); err != nil {
			cancel()
			<-done
			return nil, err
		}
	}
	path, err := profileServer(ctx, srv.pprof, seconds, dir, fmt.Sprintf("%s-%d", sc.id, callers))
	cancel()
	<-done
	if err != nil {
		return nil, err
	}
	return shares(ctx, path)
}

// waitReady calls srv until it answers, the process exits, or
// readyTimeout passes.
func waitReady(ctx context.Context, srv *server) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := srv.fn(cctx, 0)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case srv.proc.exited():
			return fmt.Errorf("%s exited: %v\n%s", srv.proc.name, err, srv.proc.out.String())
		case time.Now().After(deadline):
			return fmt.Errorf("%s did not answer within %s: %v\n%s", srv.proc.name, readyTimeout, err, srv.proc.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// perDecision returns CPU seconds per decision of res in microseconds.
func perDecision(cpu float64, res *loadgen.Result) float64 {
	if res.Sent == 0 {
		return 0
	}
	return cpu / float64(res.Sent) * 1e6
}

// firstLine returns s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// goVersion is the Go of this program, which built sluice serve too.
func goVersion() string { return runtime.Version() }
