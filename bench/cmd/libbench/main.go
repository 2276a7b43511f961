// Command libbench measures sluice's library side beside its peers in one
// run and writes the results section bench/results/library.json (see
// bench/README.md for the format and internal/section for its one
// definition), which cmd/report turns into part of BENCHMARKS.md.
//
// It starts one redis-server on a free loopback port (stopped by pid when
// it ends) and measures, interleaving the implementations round by round:
// decisions per second at 256 callers and at 1 caller with latencies,
// over 1000 keys with every call admitted; Redis CPU per decision (the
// server process's CPU from /proc/<pid>/stat, and INFO commandstats
// after CONFIG RESETSTAT); sluice's reserve and settle (Limiter.Reserve,
// Reservation.Settle) and a concurrency slot's acquire and release
// (Limiter.Acquire, Reservation.Release) beside one decision; MEMORY
// USAGE per client key;
// one abusive key hammered by 256 callers. It adds the memory store's
// figures from a go test benchmark file (-micro) and the live heap per
// key of in-process stores, which it measures itself.
//
//	cd bench && go run ./cmd/libbench -out results/library.json -micro results/micro.txt
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/bench/internal/section"
	"github.com/sluice-go/sluice/internal/testing/redisproc"
)

// config is the command line.
type config struct {
	out, micro, microCmd string
	rounds               int
	callers              int
	d256, d1, dAbuse     time.Duration
	heapKeys             int
	args                 []string // the flags given, but -micro-cmd: the command to record
	timeout              time.Duration
}

func main() {
	heapChild()
	var c config
	flag.StringVar(&c.out, "out", "results/library.json", "section file to write")
	flag.StringVar(&c.micro, "micro", "results/micro.txt", "go test -bench output with the memory store's benchmarks (missing: those figures are left out)")
	flag.StringVar(&c.microCmd, "micro-cmd", "", "the command that wrote -micro, for the section's command (make bench passes its go test run)")
	flag.IntVar(&c.rounds, "rounds", 5, "interleaved rounds of every Redis measurement (1 to 20)")
	flag.IntVar(&c.callers, "callers", 256, "concurrent callers of the concurrent runs (1 to 4096)")
	flag.DurationVar(&c.d256, "concurrent", 2*time.Second, "length of one concurrent run")
	flag.DurationVar(&c.d1, "serial", time.Second, "length of one one-caller run")
	flag.DurationVar(&c.dAbuse, "abusive", 2*time.Second, "length of one abusive-key run")
	flag.IntVar(&c.heapKeys, "heap-keys", 200_000, "keys the in-process heap-per-key measurement inserts (1000 to 10000000)")
	flag.DurationVar(&c.timeout, "timeout", 20*time.Minute, "bound on the whole run")
	flag.Parse()
	flag.Visit(func(f *flag.Flag) {
		if f.Name != "micro-cmd" {
			c.args = append(c.args, "-"+f.Name, f.Value.String())
		}
	})
	if err := c.check(); err != nil {
		fmt.Fprintln(os.Stderr, "libbench:", err)
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := run(ctx, c); err != nil {
		slog.Error("libbench failed", "err", err)
		cancel()
		stop()
		os.Exit(1) //nolint:gocritic // the deferred calls ran above
	}
}

func (c config) check() error {
	switch {
	case c.out == "":
		return errors.New("-out is empty")
	case c.rounds < 1 || c.rounds > 20:
		return fmt.Errorf("-rounds %d: want 1 to 20", c.rounds)
	case c.callers < 1 || c.callers > 4096:
		return fmt.Errorf("-callers %d: want 1 to 4096", c.callers)
	case c.d256 < 10*time.Millisecond || c.d256 > time.Minute:
		return fmt.Errorf("-concurrent %s: want 10ms to 1m", c.d256)
	case c.d1 < 10*time.Millisecond || c.d1 > time.Minute:
		return fmt.Errorf("-serial %s: want 10ms to 1m", c.d1)
	case c.dAbuse < 10*time.Millisecond || c.dAbuse > time.Minute:
		return fmt.Errorf("-abusive %s: want 10ms to 1m", c.dAbuse)
	case c.heapKeys < 1000 || c.heapKeys > 10_000_000:
		return fmt.Errorf("-heap-keys %d: want 1000 to 10000000", c.heapKeys)
	case c.timeout <= 0:
		return fmt.Errorf("-timeout %s: want more than 0", c.timeout)
	}
	return nil
}

// server is the redis-server of the run and an admin client to it.
type server struct {
	addr  string
	pid   int
	admin *goredislib.Client
}

// cpu returns the server process's user and system CPU time so far.
func (s *server) cpu() (user, system time.Duration) {
	user, system, err := procCPU(s.pid)
	if err != nil {
		slog.Warn("reading redis-server CPU", "err", err)
	}
	return user, system
}

func run(ctx context.Context, c config) error {
	started := time.Now()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return errors.New("redis-server is not in PATH: make bench installs it (make deps), or sudo apt-get install -y redis-server")
	}
	dir, err := os.MkdirTemp("", "libbench-redis-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := redisproc.StartFree(ctx, path, dir, "")
	if err != nil {
		return err
	}
	defer p.Stop()
	srv := &server{addr: p.Addr, pid: p.Pid(), admin: newGoRedis(p.Addr)}
	defer srv.admin.Close()
	version := serverInfo(ctx, srv.admin, "redis_version")
	slog.Info("redis-server started", "addr", srv.addr, "pid", srv.pid, "version", version)

	var sec section.Section
	sec.Title = "Library: sluice beside the Go rate limiters"
	sec.Command = strings.TrimSpace("go run ./cmd/libbench " + shellJoin(c.args))
	if c.microCmd != "" {
		sec.Command = c.microCmd + "\n" + sec.Command
	}
	sec.Notes = []string{
		fmt.Sprintf("One redis-server %s (%s), started by the harness on 127.0.0.1 without persistence and stopped by pid; client and server share the machine's cores, so only ratios within this run mean anything.", version, path),
		fmt.Sprintf("Redis runs: %d client keys (client-0 … client-999) cycled by every caller from its own place, every call admitted (1e6 per second per key; sluice's sliding_log at its maximum of 10000 per second), every key decided once before the timed run; each run gets fresh clients and its own key prefix. %d interleaved rounds, the implementations' order rotated each round; figures are medians over the rounds: %d callers for %s, then 1 caller for %s.", keySpace, c.rounds, c.callers, c.d256, c.d1),
		"Redis CPU per decision (the goals' measure): the redis-server process's user+system CPU over the run (/proc/<pid>/stat) over the run's decisions, network I/O and event loop included. Script time (commandstats) is the usec of EVALSHA, EVAL and FCALL in INFO commandstats (after CONFIG RESETSTAT) over the decisions: the scripts' own cost, the commands they run included; other commands' time counts every other command, including those scripts ran (counted twice). Client CPU is this harness process's CPU over the run (the load loop included) per decision. Where a goal is not met, its row names what limits it from the run's figures and from pprof profiles: of the harness during sluice's last concurrent run, and of the go test benchmark of an in-process goal.",
		"sluice is measured through its public API with its defaults: store/redis.Open(\"redis://…\") (rueidis), sluice.New(store), Limiter.Allow. redis_rate, ulule/limiter and throttled use go-redis v9 with its default pool; throttled's compare-and-swap may retry up to 1000 times (its default of 10 fails decisions under 256 callers).",
	}

	if err := memoryUsage(ctx, srv, &sec); err != nil {
		return fmt.Errorf("memory per key: %w", err)
	}
	heap, err := heapPerKey(ctx, c.heapKeys)
	if err != nil {
		return err
	}
	prof, err := newProfiler()
	if err != nil {
		return err
	}
	defer prof.close()
	if err := throughput(ctx, c, srv, prof, &sec); err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	if err := abusiveKey(ctx, c, srv, &sec); err != nil {
		return fmt.Errorf("abusive key: %w", err)
	}
	memoryStore(ctx, c, heap, prof, &sec)
	orderGoals(sec.Goals)
	sec.Notes = append(sec.Notes, fmt.Sprintf("The run took %s.", time.Since(started).Round(time.Second)))
	if err := sec.Write(c.out); err != nil {
		return err
	}
	slog.Info("wrote", "file", c.out, "took", time.Since(started).Round(time.Second))
	return nil
}

// goalOrder is the order of the goals, by the start of a goal's
// text.
var goalOrder = []string{"Redis CPU", "decisions/s", "one caller", "settle Redis CPU", "reserve+settle", "acquire+release", "Redis memory", "deny cache", "memory store"}

// orderGoals sorts goals in the order, keeping the order of
// those of one kind (sluice's algorithms).
func orderGoals(goals []section.Goal) {
	rank := func(g section.Goal) int {
		for i, p := range goalOrder {
			if strings.HasPrefix(g.Goal, p) {
				return i
			}
		}
		return len(goalOrder)
	}
	slices.SortStableFunc(goals, func(a, b section.Goal) int { return rank(a) - rank(b) })
}

// shellJoin quotes args for a POSIX shell where they need it.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
