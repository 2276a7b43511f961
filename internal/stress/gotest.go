package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// runResult is one run: each package's result, in the order given.
type runResult struct {
	n    int
	dur  time.Duration
	pkgs []pkgResult
}

func (r runResult) failed() bool {
	for _, p := range r.pkgs {
		if len(p.failures) > 0 {
			return true
		}
	}
	return false
}

// pkgResult is what one `go test -json` of one package reported.
type pkgResult struct {
	pkg                     string
	dur                     time.Duration // as the go command saw it, build included
	passed, failed, skipped int           // tests and subtests
	top                     int           // top-level tests run
	failures                []failure     // the failing tests that have no failing subtest
	elapsed                 map[string]time.Duration
	pkgOut                  []string // what the package printed outside any test
	log                     string   // the file holding the whole output
}

// failure is a failing test and what it printed.
type failure struct {
	test   string // "(package)": the package failed outside any test
	output []string
}

// testEvent is one line of `go test -json` (cmd/test2json).
type testEvent struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// tags are the build tags of the tiers make test runs: the integration
// tests and the end-to-end ones.
const tags = "integration,e2e"

// goTestArgs are the arguments of the go command for t, as make test runs
// its tests (-race -count=1 -tags integration,e2e).
func goTestArgs(t target, timeout time.Duration, extra ...string) []string {
	return append([]string{"test", "-race", "-count=1", "-tags", tags, "-timeout", timeout.String(), "-json", "-run", t.run}, append(extra, t.pkg)...)
}

// warm builds what every target's tests need, running none of them.
func warm(ctx context.Context, targets []target) error {
	for _, t := range targets {
		cmd := exec.CommandContext(ctx, "go", "test", "-race", "-count=1", "-tags", tags, "-run", "^$", t.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go test -race -tags %s -run '^$' %s: %w\n%s", tags, t.pkg, err, out)
		}
	}
	return nil
}

// runOnce runs run number n: each target's go test in turn.
func runOnce(ctx context.Context, s settings, n int) (runResult, error) {
	r := runResult{n: n}
	start := time.Now()
	for _, t := range s.targets {
		log := filepath.Join(s.logs, fmt.Sprintf("run%02d-%s.json", n, logName(t.pkg)))
		p, err := goTest(ctx, t, s.timeout, log)
		if err != nil {
			return r, err
		}
		r.pkgs = append(r.pkgs, p)
	}
	r.dur = time.Since(start)
	return r, nil
}

// logName turns a package pattern into a file name.
func logName(pkg string) string {
	name := strings.Trim(strings.NewReplacer("/", "_", ".", "").Replace(pkg), "_")
	if name == "" {
		return "root"
	}
	return name
}

// goTest runs one target's go test, keeping its output in log, and
// returns what it reported. An error is a run that could not be made
// (interrupted, no go command), not a failing test.
func goTest(ctx context.Context, t target, timeout time.Duration, log string) (pkgResult, error) {
	f, err := os.Create(log)
	if err != nil {
		return pkgResult{}, err
	}
	defer f.Close()
	cmd := exec.Command("go", goTestArgs(t, timeout)...)
	// Its own process group, so that an interrupt ends the test binary
	// and what it started too (by the group's id, the go command's pid).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(&stderr, f)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return pkgResult{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return pkgResult{}, fmt.Errorf("go test %s: %w", t.pkg, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer stop()
	p := parse(io.TeeReader(out, f))
	err = cmd.Wait()
	p.pkg, p.dur, p.log = t.pkg, time.Since(start), log
	if ctx.Err() != nil {
		return p, ctx.Err()
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return p, fmt.Errorf("go test %s: %w", t.pkg, err)
	}
	if err != nil && !slices.ContainsFunc(p.failures, func(f failure) bool { return f.test != "(package)" }) {
		// The go command failed with no failing test: a build error, a
		// test binary that died outside a test.
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		p.failures = []failure{{test: "(package)", output: append(p.pkgOut, lines...)}}
	}
	return p, nil
}

// parse reads a `go test -json` stream of one package.
func parse(r io.Reader) pkgResult {
	p := pkgResult{elapsed: map[string]time.Duration{}}
	output := map[string][]string{} // by test; "" for the package
	var failed []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e testEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			output[""] = append(output[""], sc.Text()) // not JSON: the go command's own
			continue
		}
		switch e.Action {
		case "output", "build-output":
			output[e.Test] = append(output[e.Test], strings.TrimRight(e.Output, "\n"))
		case "run":
			if !strings.Contains(e.Test, "/") {
				p.top++
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				if e.Action == "fail" {
					failed = append(failed, "")
				}
				break
			}
			p.elapsed[e.Test] = time.Duration(e.Elapsed * float64(time.Second))
			switch e.Action {
			case "pass":
				p.passed++
				delete(output, e.Test)
			case "skip":
				p.skipped++
				delete(output, e.Test)
			case "fail":
				p.failed++
				failed = append(failed, e.Test)
			}
		}
	}
	p.failures = leaves(failed, output)
	p.pkgOut = output[""]
	return p
}

// leaves returns, of the failed tests, those none of whose subtests
// failed, each with its output; the package itself ("" in failed) when
// no test failed.
func leaves(failed []string, output map[string][]string) []failure {
	var out []failure
	pkg := false
	for _, name := range failed {
		if name == "" {
			pkg = true
			continue
		}
		if slices.ContainsFunc(failed, func(o string) bool { return strings.HasPrefix(o, name+"/") }) {
			continue
		}
		var lines []string
		for _, l := range output[name] {
			if !strings.HasPrefix(strings.TrimSpace(l), "=== ") {
				lines = append(lines, l)
			}
		}
		out = append(out, failure{test: name, output: lines})
	}
	if len(out) == 0 && pkg {
		out = append(out, failure{test: "(package)", output: output[""]})
	}
	return out
}
