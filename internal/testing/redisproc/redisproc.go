// Package redisproc starts and stops redis-server processes on loopback:
// without persistence, on a given port, stopped by pid. It is the one
// mechanism behind the test helpers (internal/redistest) and `sluice demo`.
package redisproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/testing/proc"
	"github.com/sluice-go/sluice/internal/testing/testutil"
)

// startTimeout bounds how long Start waits for the server to answer.
const startTimeout = 10 * time.Second

// Process is one redis-server.
type Process struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string

	cmd    *exec.Cmd
	out    testutil.Buffer
	once   sync.Once
	exited chan struct{}
}

// Start starts the redis-server at path on 127.0.0.1:port, working in dir,
// and waits until it answers PING. Its arguments are configFile first,
// when not empty (Sentinel needs a writable one), then the common options
// (loopback only, no persistence, no daemon), then extra, which may
// override them. On Linux the server dies with the process that started it,
// even one killed by SIGKILL. Start fails when the server exits (a port
// taken meanwhile, most likely), does not answer within 10 seconds, or ctx
// ends; it leaves no process behind.
func Start(ctx context.Context, path, dir string, port int, configFile string, extra ...string) (*Process, error) {
	p := &Process{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), exited: make(chan struct{})}
	var args []string
	if configFile != "" {
		args = append(args, configFile)
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	p.cmd = exec.Command(path, append(args, extra...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	proc.DieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(startTimeout)
	for {
		if Ping(p.Addr) == nil {
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("redis-server on port %d exited: %s", port, bytes.TrimSpace([]byte(p.Output())))
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", port, startTimeout, p.Output())
		}
	}
}

// freePortTries is how many free ports StartFree tries.
const freePortTries = 5

// StartFree is Start on a free loopback port. The kernel's free port may
// be taken by another process before redis-server binds it, so when the
// server fails to start StartFree tries another port, up to 5 in all,
// and returns the last error. It stops early when ctx ends.
func StartFree(ctx context.Context, path, dir, configFile string, extra ...string) (*Process, error) {
	var lastErr error
	for range freePortTries {
		port, err := proc.FreePort()
		if err != nil {
			return nil, err
		}
		p, err := Start(ctx, path, dir, port, configFile, extra...)
		if err == nil {
			return p, nil
		}
		if lastErr = err; ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// Pid returns the server's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output returns what the server has written to its stdout and stderr.
func (p *Process) Output() string { return p.out.String() }

// Stop kills the server by its pid and waits for it to exit. It is safe to
// call more than once.
func (p *Process) Stop() {
	p.once.Do(func() {
		if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return
		}
		<-p.exited
	})
}

// Ping sends PING to the Redis server at addr and expects +PONG.
func Ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
