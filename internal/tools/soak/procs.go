package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/internal/testing/proc"
	"github.com/sluice-go/sluice/internal/testing/redisproc"
)

// redisServer is the soak's redis-server, restarted on the same port.
type redisServer struct {
	path, dir string
	port      int

	mu     sync.Mutex
	p      *redisproc.Process
	paused bool
}

func startRedis(ctx context.Context, path, dir string) (*redisServer, error) {
	p, err := redisproc.StartFree(ctx, path, dir, "")
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(p.Addr, ":")
	n, _ := strconv.Atoi(port)
	return &redisServer{path: path, dir: dir, port: n, p: p}, nil
}

func (r *redisServer) addr() string { r.mu.Lock(); defer r.mu.Unlock(); return r.p.Addr }
func (r *redisServer) pid() int     { r.mu.Lock(); defer r.mu.Unlock(); return r.p.Pid() }

// restart kills the server (SIGKILL, by pid), waits down, and starts it
// again on its port, empty. It returns once the new server answers PING.
func (r *redisServer) restart(ctx context.Context, down time.Duration) error {
	r.mu.Lock()
	r.p.Stop()
	r.mu.Unlock()
	select {
	case <-time.After(down):
	case <-ctx.Done():
		return ctx.Err()
	}
	var lastErr error
	for range 50 { // the old process's port may take a moment to be free
		p, err := redisproc.Start(ctx, r.path, r.dir, r.port, "")
		if err == nil {
			r.mu.Lock()
			r.p = p
			r.mu.Unlock()
			return nil
		}
		if lastErr = err; ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart redis-server on port %d: %w", r.port, lastErr)
}

// pause sends SIGSTOP (pause true) or SIGCONT to the server.
func (r *redisServer) pause(stop bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if err := syscall.Kill(r.p.Pid(), sig); err != nil {
		return fmt.Errorf("%v to redis-server %d: %w", sig, r.p.Pid(), err)
	}
	r.paused = stop
	return nil
}

// stop lets a hung server go on, then kills it by its pid.
func (r *redisServer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.paused {
		_ = syscall.Kill(r.p.Pid(), syscall.SIGCONT)
	}
	r.p.Stop()
}

// daemon is the soak's `sluice serve`.
type daemon struct {
	cmd  *exec.Cmd
	base string // http://host:port
	done chan struct{}

	mu   sync.Mutex
	msgs map[string]int // log lines by msg
	logs []string       // the first lines, for an error message
}

// startSluice starts `sluice serve` with JSON logs on a free loopback port
// and waits for its "serving" line.
func startSluice(ctx context.Context, bin, cfg, redisURL string) (*daemon, error) {
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--log-format", "json")
	cmd.Env = append(os.Environ(), "SLUICE_REDIS_URL="+redisURL)
	proc.DieWithParent(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sluice serve: %w", err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{}), msgs: map[string]int{}}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var e struct {
				Msg  string `json:"msg"`
				HTTP string `json:"http"`
			}
			_ = json.Unmarshal(sc.Bytes(), &e)
			d.mu.Lock()
			d.msgs[e.Msg]++
			if len(d.logs) < 20 {
				d.logs = append(d.logs, sc.Text())
			}
			d.mu.Unlock()
			if e.Msg == "serving" {
				ready <- e.HTTP
			}
		}
		_ = cmd.Wait()
		close(d.done)
	}()
	select {
	case addr := <-ready:
		d.base = "http://" + addr
		return d, nil
	case <-d.done:
		return nil, fmt.Errorf("sluice serve exited:\n%s", strings.Join(d.logs, "\n"))
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	d.stop()
	return nil, fmt.Errorf("sluice serve did not log serving:\n%s", strings.Join(d.logs, "\n"))
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop sends SIGTERM, by pid, and SIGKILL if the process has not exited
// 15s later; it waits for the exit.
func (d *daemon) stop() {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = d.cmd.Process.Kill()
	}
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// logCounts returns how many log lines had each msg.
func (d *daemon) logCounts() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.msgs))
	for k, v := range d.msgs {
		out[k] = v
	}
	return out
}

// goroutines returns go_goroutines from /metrics.
func (d *daemon) goroutines() (int, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(d.base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("/metrics has no go_goroutines")
}

// rss returns the resident set size of process pid, in bytes, from
// /proc/<pid>/status (VmRSS).
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(string(b))
}

// parseVmRSS returns the VmRSS line of a /proc/<pid>/status, in bytes.
func parseVmRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		v, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS line %q: %w", line, err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("no VmRSS line")
}
