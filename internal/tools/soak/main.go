// Command soak drives `sluice serve`, with a real redis-server and
// on_error local, at a fixed request rate for a long run, and breaks Redis
// on the way: it restarts it twice (SIGKILL, down 1s, started again empty
// on its port) and hangs it once (SIGSTOP, then SIGCONT). Every interval
// it prints the requests sent, their answers, errors (anything but 200 and
// 429, transport errors included), degraded decisions, latency
// percentiles, and the RSS and goroutines of the sluice process; at the
// end a summary of each fault window and of the whole run. It exits 1 when
// a client saw an error, which on_error local must never show.
//
// Run it from the module root (make soak does):
//
//	go run ./internal/soak                       # 10 minutes
//	SOAK_DURATION=60s go run ./internal/soak     # a short try
//
// The load is open-loop: requests are scheduled at -rate per second
// whatever the answers, and sent by at most -workers clients at once; a
// request whose turn comes while every client is busy waits, unless as
// many requests wait already: then it is not sent, and is counted as
// shed. Latency is measured from a request's scheduled time, so time spent
// waiting for a free client counts.
//
// It starts every process on loopback and stops each by its pid (the
// kernel kills them too if soak dies: they die with their parent).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run())
}

// settings are the flags.
type settings struct {
	duration, interval, hang time.Duration
	rate, workers, keys      int
	sluice                   string
}

func parseFlags() (settings, error) {
	var s settings
	def := 10 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return s, fmt.Errorf("SOAK_DURATION=%q: not a positive duration", v)
		}
		def = d
	}
	flag.DurationVar(&s.duration, "duration", def, "how long the load runs (env SOAK_DURATION)")
	flag.DurationVar(&s.interval, "interval", 10*time.Second, "how often a report row is printed")
	flag.DurationVar(&s.hang, "hang", 10*time.Second, "how long Redis hangs (SIGSTOP); at most a sixth of -duration")
	flag.IntVar(&s.rate, "rate", 500, "requests per second, scheduled whatever the answers")
	flag.IntVar(&s.workers, "workers", 256, "clients sending at most at once")
	flag.IntVar(&s.keys, "keys", 100, "distinct client keys, in turn; each may send 4 per second (rule soak)")
	flag.StringVar(&s.sluice, "sluice", "", "the sluice binary (empty: go build ./cmd/sluice into a temporary directory)")
	flag.Parse()
	switch {
	case flag.NArg() > 0:
		return s, fmt.Errorf("unexpected argument %q", flag.Arg(0))
	case s.duration <= 0 || s.interval <= 0 || s.hang <= 0:
		return s, errors.New("-duration, -interval and -hang must be positive")
	case s.rate <= 0 || s.workers <= 0 || s.keys <= 0:
		return s, errors.New("-rate, -workers and -keys must be positive")
	}
	s.hang = min(s.hang, s.duration/6)
	return s, nil
}

func run() int {
	s, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errs, err := soak(ctx, s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	if errs > 0 {
		fmt.Printf("\nFAIL: clients saw %d errors under on_error local, which should show none\n", errs)
		return 1
	}
	return 0
}

// policyFile is the soak's policy: on_error local, and rule soak, a token
// bucket of 4 per second per key.
const policyFile = `redis:
  on_error: local
rules:
  - {name: soak, key: "header:X-Client", algorithm: token_bucket, limit: 4, period: 1s}
`

// soak runs the whole soak and returns how many errors the clients saw.
func soak(ctx context.Context, s settings) (int, error) {
	redisPath, err := exec.LookPath("redis-server")
	if err != nil {
		return 0, errors.New("redis-server is not in PATH: run `make deps` or `sudo apt-get install -y redis-server`")
	}
	dir, err := os.MkdirTemp("", "sluice-soak")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	bin := s.sluice
	if bin == "" {
		if bin, err = buildSluice(ctx, dir); err != nil {
			return 0, err
		}
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(policyFile), 0o600); err != nil {
		return 0, err
	}
	r, err := startRedis(ctx, redisPath, dir)
	if err != nil {
		return 0, err
	}
	defer r.stop()
	d, err := startSluice(ctx, bin, cfg, "redis://"+r.addr())
	if err != nil {
		return 0, err
	}
	defer d.stop()

	fmt.Printf("soak: sluice serve (pid %d) on %s, redis-server %s (pid %d), on_error local\n", d.pid(), d.base, r.addr(), r.pid())
	fmt.Printf("soak: %v at %d requests/s, at most %d clients, %d keys of 4/s each; Redis restarted at %v and %v, hung for %v at %v\n\n",
		s.duration, s.rate, s.workers, s.keys, at(s, restart1), at(s, restart2), s.hang, at(s, hangAt))

	l := newLoad(ctx, d.base, s)
	rssStart, _ := rss(d.pid())
	goStart, _ := d.goroutines()
	faults := schedule(ctx, s, l, r)
	report(ctx, s, l, d)
	l.wait()
	fl := <-faults
	rssEnd, _ := rss(d.pid())
	goEnd, _ := d.goroutines()
	if ctx.Err() != nil {
		return 0, errors.New("interrupted")
	}
	return summary(os.Stdout, s, l, fl.windows, fl.err, d, rssStart, rssEnd, goStart, goEnd), nil
}

// The fault schedule, in fractions of the run.
const (
	restart1 = 0.20
	restart2 = 0.45
	hangAt   = 0.70
)

// at returns the time into the run at fraction f.
func at(s settings, f float64) time.Duration {
	return time.Duration(f * float64(s.duration)).Round(time.Second)
}

// buildSluice builds ./cmd/sluice of the module soak runs in into dir.
func buildSluice(ctx context.Context, dir string) (string, error) {
	mod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(mod)))
	bin := filepath.Join(dir, "sluice")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sluice")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice in %s: %w\n%s", root, err, out)
	}
	return bin, nil
}
