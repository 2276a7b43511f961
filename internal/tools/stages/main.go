// Command stages runs the stages of make test and says how long each
// took, so that a slow run shows which part is slow.
//
//	go run ./internal/tools/stages [-make PROGRAM] [-since UNIXTIME] STEP...
//
// A stage is a target of the Makefile, made by PROGRAM --no-print-directory
// TARGET (PROGRAM is make; the Makefile passes $(MAKE)). The steps run one
// after another. A STEP is one lane, or several separated by &, which run
// at once, as a shell runs a command ended by & beside the next; a lane
// is one stage or several separated by spaces, made one after another:
//
//	'deps & modules vulndb & staticcheck upstream' fmt vet
//
// makes deps, modules and staticcheck at once, vulndb after modules and
// upstream after staticcheck, then fmt once all of those have ended, then
// vet. When a step has lanes beside each other, each line of their output
// is prefixed with the stage's name; otherwise a stage writes straight to
// stdout and stderr. As each stage ends stages prints
//
//	<== vet: ok, 1m02s
//
// and after the last step a table of every stage: when it started
// (minutes:seconds after the run began), how long it took, the processor
// time (user and system) of make and every process it waited for, and
// whether it passed, failed or never ran, then the total. The processor
// time shows where the cores went: a stage that took 2m with 3m50s of it
// kept two cores busy, one with 20s mostly waited. A failed stage stops the
// run: the stages running beside it are left to end (an apt-get is never
// cut short), but no other stage starts, and the table is printed all the
// same, naming the stage that failed.
//
// -since is the time the run began, in seconds since the Unix epoch
// (date +%s.%N): the table's first row, "go run stages", is then the time
// it took to build and start this program, and the total counts it.
//
// stages exits 1 when a stage failed. SIGINT and SIGTERM are passed on to
// the stages running, and stop the run as a failure does.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	makeProg := flag.String("make", "make", "the make program that makes each stage")
	since := flag.String("since", "", "when the run began, in seconds since the Unix epoch (date +%s.%N); default: when stages starts")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: stages [-make PROGRAM] [-since UNIXTIME] STEP...\n\nThe steps run in order. A STEP is lanes separated by &, run at once;\na lane is make targets separated by spaces, made in order.")
		flag.PrintDefaults()
	}
	flag.Parse()
	steps, err := parseSteps(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "stages:", err)
		os.Exit(2)
	}
	r := &runner{make: []string{*makeProg}, stdout: os.Stdout, stderr: os.Stderr, began: time.Now()}
	if *since != "" {
		sec, err := strconv.ParseFloat(*since, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "stages: -since %q: want seconds since the Unix epoch, as date +%%s.%%N prints them\n", *since)
			os.Exit(2)
		}
		r.since = time.Unix(0, int64(sec*1e9))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go r.forward(sig)
	if err := r.run(steps); err != nil {
		os.Exit(1)
	}
}

// step is lanes run at once; lane is stages made one after another.
type (
	step []lane
	lane []*stage
)

// parseSteps reads the steps of the command line: each argument is one
// step, its lanes separated by &, a lane's stages by spaces.
func parseSteps(args []string) ([]step, error) {
	if len(args) == 0 {
		return nil, errors.New("no steps given; want one or more make targets")
	}
	seen := map[string]bool{}
	var steps []step
	for i, a := range args {
		var st step
		for _, l := range strings.Split(a, "&") {
			names := strings.Fields(l)
			if len(names) == 0 {
				return nil, fmt.Errorf("step %d (%q) has an empty lane; want make targets separated by spaces, lanes by &", i+1, a)
			}
			var ln lane
			for _, n := range names {
				// make would read either as a variable or an option, and
				// then make its default goal: make test within make test.
				if strings.HasPrefix(n, "-") || strings.Contains(n, "=") {
					return nil, fmt.Errorf("step %d: %q is not a make target (make would read it as an option or a variable)", i+1, n)
				}
				if seen[n] {
					return nil, fmt.Errorf("stage %q is named twice; a run makes each target once", n)
				}
				seen[n] = true
				ln = append(ln, &stage{name: n})
			}
			st = append(st, ln)
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// stage is one make target of the run.
type stage struct {
	name       string
	start, end time.Time     // zero until the stage starts, ends
	cpu        time.Duration // the processor time of make and what it waited for (user and system)
	err        error         // why it failed
}

// runner runs the steps and reports on them.
type runner struct {
	make           []string  // the make program and its arguments, without the target
	stdout, stderr io.Writer // where stages and their reports write
	since          time.Time // when the run began, if before this program did
	began          time.Time // when this program started

	mu          sync.Mutex // guards what follows, and serializes writes to stdout
	running     map[*exec.Cmd]bool
	interrupted os.Signal
	failed      *stage // the first stage that failed
}

// run makes each step's stages, one step after another, until a stage
// fails, then prints the table of all of them. It returns an error when a
// stage failed or the run was interrupted.
func (r *runner) run(steps []step) error {
	var all []*stage
	for _, st := range steps {
		for _, ln := range st {
			all = append(all, ln...)
		}
	}
	for _, st := range steps {
		if r.stopped() {
			break
		}
		var lanes, names []string
		for _, ln := range st {
			var l []string
			for _, s := range ln {
				l = append(l, s.name)
			}
			names = append(names, l...)
			lanes = append(lanes, strings.Join(l, " "))
		}
		r.printf("==> %s\n", strings.Join(lanes, " & "))
		var wg sync.WaitGroup
		for _, ln := range st {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, s := range ln {
					if !r.runStage(s, len(st) > 1, width(names)) {
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	r.table(all)
	if f := r.firstFailure(); f != nil {
		return fmt.Errorf("stage %s failed: %w", f.name, f.err)
	}
	if sig := r.signal(); sig != nil {
		return fmt.Errorf("interrupted by %v", sig)
	}
	return nil
}

// runStage makes the target s names, unless the run has stopped, and
// reports whether it passed. Beside other lanes (beside) its output lines
// are prefixed with its name, padded to pad.
func (r *runner) runStage(s *stage, beside bool, pad int) bool {
	args := append(append([]string{}, r.make[1:]...), "--no-print-directory", s.name)
	cmd := exec.Command(r.make[0], args...)
	var pw *prefixWriter
	if beside {
		pw = &prefixWriter{r: r, prefix: fmt.Sprintf("%-*s | ", pad, s.name)}
		cmd.Stdout, cmd.Stderr = pw, pw
		// A process the stage left behind may hold the pipe open;
		// its output is then cut off a while after make has ended.
		cmd.WaitDelay = time.Minute
	} else {
		cmd.Stdout, cmd.Stderr = r.stdout, r.stderr
	}
	r.mu.Lock()
	if r.failed != nil || r.interrupted != nil {
		r.mu.Unlock()
		return false // not run
	}
	s.start = time.Now()
	err := cmd.Start()
	if err == nil {
		if r.running == nil {
			r.running = map[*exec.Cmd]bool{}
		}
		r.running[cmd] = true
	}
	r.mu.Unlock()
	if err == nil {
		err = cmd.Wait()
		r.mu.Lock()
		delete(r.running, cmd)
		r.mu.Unlock()
	}
	if pw != nil {
		pw.flush()
	}
	s.end, s.err = time.Now(), err
	if cmd.ProcessState != nil {
		// wait4's usage counts the processes make waited for too.
		s.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		r.mu.Lock()
		if r.failed == nil {
			r.failed = s
		}
		r.mu.Unlock()
		r.printf("<== %s: FAILED after %s (%v)\n", s.name, duration(s.end.Sub(s.start)), err)
		return false
	}
	r.printf("<== %s: ok, %s\n", s.name, duration(s.end.Sub(s.start)))
	return true
}

// forward passes each signal from sig on to the stages running, and
// keeps the first so that no other stage starts.
func (r *runner) forward(sig <-chan os.Signal) {
	for s := range sig {
		r.mu.Lock()
		if r.interrupted == nil {
			r.interrupted = s
		}
		for cmd := range r.running {
			_ = cmd.Process.Signal(s)
		}
		r.mu.Unlock()
	}
}

// stopped reports whether a stage failed or a signal came, after which
// no stage starts.
func (r *runner) stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed != nil || r.interrupted != nil
}

// firstFailure returns the first stage that failed, if one did.
func (r *runner) firstFailure() *stage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// signal returns the signal that interrupted the run, if any.
func (r *runner) signal() os.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.interrupted
}

// table prints every stage's start, time taken and result, then the
// total.
func (r *runner) table(all []*stage) {
	t0 := r.began
	if !r.since.IsZero() {
		t0 = r.since
	}
	type row struct{ name, start, took, cpu, result string }
	rows := []row{{"stage", "start", "took", "cpu", "result"}}
	if !r.since.IsZero() {
		rows = append(rows, row{"go run stages", clock(0), duration(r.began.Sub(r.since)), "", "ok"})
	}
	var cpu time.Duration
	for _, s := range all {
		cpu += s.cpu
		switch {
		case s.start.IsZero():
			rows = append(rows, row{s.name, "", "", "", "not run"})
		case s.err != nil:
			rows = append(rows, row{s.name, clock(s.start.Sub(t0)), duration(s.end.Sub(s.start)), duration(s.cpu), fmt.Sprintf("FAILED (%v)", s.err)})
		default:
			rows = append(rows, row{s.name, clock(s.start.Sub(t0)), duration(s.end.Sub(s.start)), duration(s.cpu), "ok"})
		}
	}
	total := row{"total", "", duration(time.Since(t0)), duration(cpu), "ok"}
	if failed := r.firstFailure(); failed != nil {
		total.result = "FAILED at " + failed.name
	} else if sig := r.signal(); sig != nil {
		total.result = fmt.Sprintf("interrupted (%v)", sig)
	}
	rows = append(rows, total)
	pad := 0
	for _, w := range rows {
		pad = max(pad, len(w.name))
	}
	var b strings.Builder
	b.WriteString("\nstage times (start: minutes:seconds into the run; cpu: processor time, user and system):\n")
	for _, w := range rows {
		fmt.Fprintf(&b, "  %-*s  %5s  %6s  %6s  %s\n", pad, w.name, w.start, w.took, w.cpu, w.result)
	}
	r.printf("%s", b.String())
}

// printf writes a report line to stdout, between the lines of stages
// running at once.
func (r *runner) printf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.stdout, format, args...)
}

// prefixWriter writes the output of a stage running beside others to
// the runner's stdout a whole line at a time, each after its prefix.
type prefixWriter struct {
	r      *runner
	prefix string
	buf    []byte // the line begun and not yet ended
}

// Write implements io.Writer.
func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	lines := p.buf
	for {
		i := bytes.IndexByte(lines, '\n')
		if i < 0 {
			break
		}
		p.r.printf("%s%s", p.prefix, lines[:i+1])
		lines = lines[i+1:]
	}
	p.buf = append(p.buf[:0], lines...)
	return len(b), nil
}

// flush writes the last line if the stage did not end it.
func (p *prefixWriter) flush() {
	if len(p.buf) > 0 {
		p.r.printf("%s%s\n", p.prefix, p.buf)
		p.buf = p.buf[:0]
	}
}

// width is the length of the longest of names.
func width(names []string) int {
	n := 0
	for _, s := range names {
		n = max(n, len(s))
	}
	return n
}

// duration formats d for a person: tenths of a second under a minute,
// else minutes and seconds (3m07s).
func duration(d time.Duration) string {
	if d < 59950*time.Millisecond {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%dm%02ds", s/60, s%60)
}

// clock formats an offset into the run as minutes:seconds (12:07).
func clock(d time.Duration) string {
	s := int(d / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
