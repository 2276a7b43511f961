// Command stress runs the timing-sensitive tests of sluice several times in
// a row while a CPU hog keeps every core busy, and reports what a flake
// would hide: each run's result and time, each failing test's output, and
// for each test how many runs it failed. It exits 1 when any run failed.
//
// Run it from the module root; make stress does, with the default set of
// tests (STRESS_TESTS in the Makefile, the one place that states it):
//
//	go run ./internal/stress [-runs N] [-hogs N] PKG=REGEXP...
//	STRESS_RUNS=2 make stress                  # a short try
//
// Each PKG=REGEXP is one `go test -race -count=1 -json -run REGEXP PKG`,
// as make test runs its tests; a run is each of them in turn. The hog is
// -hogs processes (by default one per CPU), each this program again
// spinning one thread, at the priority the tests run at, started before
// the first run and stopped by pid after the last; the report says how
// much CPU they took, and a hog that ends early fails the stress. The
// full `go test -json` output of every run is kept in -logs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if os.Getenv(hogEnv) == "1" {
		spin()
	}
	os.Exit(run())
}

// settings are the flags and arguments.
type settings struct {
	runs, hogs int
	timeout    time.Duration
	logs       string
	targets    []target
}

// target is one package and the -run regexp of its tests.
type target struct {
	pkg, run string
}

// parseTarget reads PKG=REGEXP.
func parseTarget(arg string) (target, error) {
	pkg, re, ok := strings.Cut(arg, "=")
	if !ok || pkg == "" || re == "" {
		return target{}, fmt.Errorf("argument %q: want PKG=REGEXP, e.g. './cmd/sluice=^TestFault'", arg)
	}
	return target{pkg: pkg, run: re}, nil
}

func parseFlags(args []string) (settings, error) {
	s := settings{}
	runs := 10
	if v := os.Getenv("STRESS_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return s, fmt.Errorf("STRESS_RUNS=%q: not a positive number of runs", v)
		}
		runs = n
	}
	fs := flag.NewFlagSet("stress", flag.ContinueOnError)
	fs.IntVar(&s.runs, "runs", runs, "how many runs in a row (env STRESS_RUNS)")
	fs.IntVar(&s.hogs, "hogs", runtime.NumCPU(), "busy processes beside the tests (0: none, a run without load to compare)")
	fs.DurationVar(&s.timeout, "timeout", 15*time.Minute, "go test -timeout of each package in a run")
	fs.StringVar(&s.logs, "logs", "", "directory for each run's go test -json output (empty: a new temporary directory, kept)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	switch {
	case s.runs < 1:
		return s, errors.New("-runs must be at least 1")
	case s.hogs < 0:
		return s, errors.New("-hogs must not be negative")
	case fs.NArg() == 0:
		return s, errors.New("no tests: give PKG=REGEXP arguments (make stress gives the default set, STRESS_TESTS)")
	}
	for _, arg := range fs.Args() {
		t, err := parseTarget(arg)
		if err != nil {
			return s, err
		}
		s.targets = append(s.targets, t)
	}
	return s, nil
}

func run() int {
	s, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "stress:", err)
		return 2
	}
	if s.logs == "" {
		if s.logs, err = os.MkdirTemp("", "sluice-stress-"); err != nil {
			fmt.Fprintln(os.Stderr, "stress:", err)
			return 1
		}
	} else if err := os.MkdirAll(s.logs, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "stress:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed, err := stress(ctx, s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stress:", err)
		return 1
	}
	if failed > 0 {
		fmt.Printf("\nFAIL: %d of %d runs failed (logs in %s)\n", failed, s.runs, s.logs)
		return 1
	}
	fmt.Printf("\nPASS: %d of %d runs passed\n", s.runs, s.runs)
	return 0
}

// stress starts the hog, runs every run, stops the hog and prints the
// summary. It returns how many runs failed.
func stress(ctx context.Context, s settings) (int, error) {
	fmt.Printf("stress: %d runs of %d packages under %d hog processes on %d CPUs; logs in %s\n",
		s.runs, len(s.targets), s.hogs, runtime.NumCPU(), s.logs)
	for _, t := range s.targets {
		fmt.Printf("  go test -race -count=1 -json -run '%s' %s\n", t.run, t.pkg)
	}
	// Build the test binaries once before the hog starts, so that the
	// first run does not spend its time compiling under it.
	if err := warm(ctx, s.targets); err != nil {
		return 0, err
	}
	h, err := startHog(s.hogs)
	if err != nil {
		return 0, err
	}
	defer h.stop()
	fmt.Println()
	sum := newSummary(s.targets)
	start := time.Now()
	for i := 1; i <= s.runs; i++ {
		r, err := runOnce(ctx, s, i)
		if err != nil {
			return 0, err
		}
		sum.add(r)
		printRun(os.Stdout, s.runs, r)
		if dead := h.exited(); dead != "" {
			return 0, fmt.Errorf("after run %d: %s: the load was not there for the whole run", i, dead)
		}
	}
	wall := time.Since(start)
	load := h.stop()
	sum.print(os.Stdout, wall, load)
	if n := sum.empty(); n != "" {
		return 0, fmt.Errorf("%s: the -run regexp matched no test", n)
	}
	return sum.failedRuns, nil
}
