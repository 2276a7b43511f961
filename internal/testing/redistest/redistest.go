// Package redistest starts real redis-server processes for tests: on a free
// loopback port, without persistence, stopped by pid when the test ends.
// There is no fake: a test that needs Redis fails, with a message saying how
// to install it, when redis-server is missing. Only tests of the integration
// tier (//go:build integration) use it.
package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/proc"
	"github.com/sluice-go/sluice/internal/testing/redisproc"
)

// Server is one redis-server process.
type Server struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string
	// TLSAddr is the host:port of its TLS port, for a server started
	// with TLS (StartTLS), or "".
	TLSAddr string

	proc *redisproc.Process
}

// Start starts a redis-server for t on a free port (see
// redisproc.StartFree) and stops it when t ends. It fails t if
// redis-server is not installed or does not come up. The stop is registered after the server's temporary directory, so it runs first
// (cleanups run last first): the process never writes in a directory
// being removed.
func Start(t testing.TB) *Server {
	t.Helper()
	path := Need(t)
	p, err := redisproc.StartFree(context.Background(), path, t.TempDir(), "")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := &Server{Addr: p.Addr, proc: p}
	t.Cleanup(s.Stop)
	return s
}

// Need returns the path of redis-server for t, which runs it: through
// Start, StartCluster or StartSentinel, which call Need, or otherwise (a
// program under test that starts redis-server from PATH). It fails t, with
// how to install it, when redis-server is not in PATH.
func Need(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (it is not in PATH): run `make test`, which installs it, or `sudo apt-get install -y redis-server`")
	}
	return path
}

// retryPorts calls start with a free port until it succeeds (a port may
// be taken between proc.FreePort and the server's bind), failing t after
// 5 tries, and stops the server it returns when t ends. Start needs no
// more than redisproc.StartFree; the cluster and Sentinel starts use
// retryPorts, a cluster node since it needs a second free port per try.
// The stop is registered after start returns, so it runs before the
// removal of any temporary directory start created (cleanups run last
// first): the process never writes in a directory being removed.
func retryPorts(t testing.TB, start func(port int) (*Server, error)) *Server {
	t.Helper()
	var lastErr error
	for range 5 {
		port, err := proc.FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s, err := start(port)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err // most likely the port was taken meanwhile: try another
	}
	t.Fatalf("redistest: %v", lastErr)
	return nil
}

// waitFor polls cond until it returns nil, failing t with cond's last error
// at deadline.
func waitFor(t testing.TB, deadline time.Time, what string, cond func() error) {
	t.Helper()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: timed out waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// launch starts a redis-server at path on port in dir (see
// redisproc.Start for configFile and extra) and waits until it answers.
func launch(path, dir string, port int, configFile string, extra ...string) (*Server, error) {
	p, err := redisproc.Start(context.Background(), path, dir, port, configFile, extra...)
	if err != nil {
		return nil, err
	}
	return &Server{Addr: p.Addr, proc: p}, nil
}

// Restart starts a stopped server again on the same address, empty, and
// stops it when t ends.
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	path := Need(t)
	p, _ := strconv.Atoi(port(s.Addr))
	var lastErr error
	for range 50 { // the old process's port may take a moment to be free
		n, err := launch(path, t.TempDir(), p, "")
		if err == nil {
			t.Cleanup(n.Stop)
			return n
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("redistest: restart on %s: %v", s.Addr, lastErr)
	return nil
}

// Stop kills the server (by its pid) and waits for it to exit. It is safe
// to call more than once; tests call it to simulate an outage.
func (s *Server) Stop() { s.proc.Stop() }

// Pid returns the server's process id, for a test that signals it (SIGSTOP
// and SIGCONT to hang it and let it go on). Stop kills a stopped process
// too.
func (s *Server) Pid() int { return s.proc.Pid() }

// Do sends one command to the server and returns its reply: a string
// (simple or bulk), an int64, a []any, or nil. It fails t on an error
// reply or a connection error.
func (s *Server) Do(t testing.TB, args ...string) any {
	t.Helper()
	reply, err := command(s.Addr, args...)
	if err != nil {
		t.Fatalf("redistest: %s on %s: %v", strings.Join(args, " "), s.Addr, err)
	}
	return reply
}

// output returns what the server has written to its stdout and stderr.
func (s *Server) output() string { return s.proc.Output() }

// port returns the port of a host:port.
func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
