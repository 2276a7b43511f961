package cdp

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// FindProgram returns the path of a program: $env when set, else the
// first of names on $PATH. The error names what (say "Chromium"), the
// names tried and install, a hint on how to install one.
func FindProgram(env string, names []string, what, install string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return exec.LookPath(p)
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s found: none of %s is on $PATH and $%s is not set (%s)", what, strings.Join(names, ", "), env, install)
}

// Launch says how to start a browser.
type Launch struct {
	// Name names the browser in errors ("chromium").
	Name string
	// Path is the program, Args its arguments, and Env what is added to
	// the test's environment.
	Path string
	Args []string
	Env  []string
	// Dir is the browser's profile directory, which Process.Close (or
	// Start, when it fails) removes.
	Dir string
	// Ready is the beginning of the line of stderr that says the
	// browser's endpoint listens ("DevTools listening on ").
	Ready string
}

// Process is a browser started by Launch.Start: in a process group of
// its own (on Linux killed with the test binary, even by SIGKILL), its
// stderr kept.
type Process struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{}

	mu     sync.Mutex
	stderr bytes.Buffer // the first 64 KiB of its stderr, for errors
}

// maxStderr bounds what a Process keeps of the browser's stderr.
const maxStderr = 64 << 10

// Start starts the browser and waits (bounded by ctx) until it writes
// the line that begins with l.Ready to stderr; it returns the rest of
// that line. The caller must Close the Process.
func (l Launch) Start(ctx context.Context) (*Process, string, error) {
	cmd := exec.Command(l.Path, l.Args...)
	if len(l.Env) > 0 {
		cmd.Env = append(os.Environ(), l.Env...)
	}
	ownGroup(cmd)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(l.Dir)
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(l.Dir)
		return nil, "", fmt.Errorf("start %s: %w", l.Path, err)
	}
	p := &Process{cmd: cmd, dir: l.Dir, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, l.Ready); ok {
				select {
				case ready <- rest:
				default:
				}
			}
			p.mu.Lock()
			if p.stderr.Len() < maxStderr {
				p.stderr.WriteString(line + "\n")
			}
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pipe)
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case rest := <-ready:
		return p, rest, nil
	case <-p.done:
		p.Close()
		return nil, "", fmt.Errorf("%s exited before its endpoint listened: %s\n%s", l.Name, cmd.ProcessState, p.Stderr())
	case <-ctx.Done():
		p.Close()
		return nil, "", fmt.Errorf("%s's endpoint did not listen: %w\n%s", l.Name, ctx.Err(), p.Stderr())
	}
}

// Pid returns the browser's process id (which is its process group's).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stderr returns what the browser wrote to stderr (its first 64 KiB).
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Close kills the browser, its process group and so its helper
// processes, by pid, waits for it (at most 10 s), and removes its profile.
func (p *Process) Close() {
	killGroup(p.cmd)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	os.RemoveAll(p.dir)
}

// Poll evaluates the boolean JavaScript expression cond with eval every
// 100 ms until it is true, or ctx ends (the error then says what cond
// last was): the WaitFor of a page, whichever its protocol.
func Poll(ctx context.Context, eval func(ctx context.Context, expr string, out any) error, cond string) error {
	var last error
	for {
		var ok bool
		err := eval(ctx, "Boolean("+cond+")", &ok)
		if err == nil && ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last: %v)", cond, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w (still false)", cond, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
