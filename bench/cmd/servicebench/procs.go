package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/testing/proc"
)

// process is a server this program started: on loopback, dying with
// this program (Linux), stopped by its pid.
type process struct {
	name string
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan struct{}
}

// lockedBuffer is a bytes.Buffer safe for a process's concurrent writes,
// keeping at most its first 64 KiB.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := 64<<10 - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start starts bin with args and env (added to this process's) as name.
func start(name, bin string, args, env []string) (*process, error) {
	p := &process{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	proc.DieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// pid returns the process's id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop kills the process by its pid and waits for it.
func (p *process) stop() {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// freeAddr returns a free loopback address.
func freeAddr() (string, error) {
	port, err := proc.FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

// freeAddrs returns n free loopback addresses.
func freeAddrs(n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		var err error
		if addrs[i], err = freeAddr(); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times, USER_HZ:
// getconf CLK_TCK, 100 where it cannot be read.
var clockTicks = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if n, perr := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && perr == nil && n > 0 {
		return float64(n)
	}
	return 100
}()

// cpuSeconds returns the CPU time, user and system, that process pid has
// used so far, from /proc/<pid>/stat (its threads included).
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses,
	// so the fields are counted from its last ')'. utime and stime are
	// fields 14 and 15, the 12th and 13th after it.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	return (u + st) / clockTicks, nil
}

// cacheDir is where the peers are installed, once: sluice's cache
// directory, as the root Makefile's `make upstream` uses it.
func cacheDir() (string, error) {
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "sluice"), nil
}

// install returns the path of the binary bin that `go install pkg@version`
// makes in dir, installing it first when it is not there.
func install(ctx context.Context, dir, pkg, version, bin string) (string, error) {
	path := filepath.Join(dir, bin)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		return path, nil
	}
	fmt.Fprintf(os.Stderr, "installing %s@%s into %s\n", pkg, version, dir)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", pkg+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w\n%s", pkg, version, err, out)
	}
	return path, nil
}

// buildSluice builds cmd/sluice of the checkout at root into dir.
func buildSluice(ctx context.Context, root, dir string) (string, error) {
	path := filepath.Join(dir, "sluice")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/sluice")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice: %w\n%s", err, out)
	}
	return path, nil
}

// sluiceRoot returns the directory of the sluice module this module
// replaces with its parent directory.
func sluiceRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/sluice-go/sluice").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/sluice-go/sluice: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
