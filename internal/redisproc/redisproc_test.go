package redisproc

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-go/sluice/internal/proc"
)

func serverPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: run `make test`, which installs it")
	}
	return path
}

// gone reports whether pid no longer runs.
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

func TestStartStop(t *testing.T) {
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), serverPath(t), t.TempDir(), port, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := Ping(p.Addr); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
	p.Stop()
	p.Stop() // idempotent
	if !gone(p.Pid()) {
		t.Errorf("pid %d still runs after Stop", p.Pid())
	}
}

// TestStartFails: a port already taken makes the server exit; Start says
// why and leaves no process behind. A canceled context stops the wait.
func TestStartFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if _, err := Start(context.Background(), serverPath(t), t.TempDir(), port, ""); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("Start on a taken port: %v, want an error saying the server exited", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A server told to listen on no TCP port never answers PING.
	if _, err := Start(ctx, serverPath(t), t.TempDir(), 0, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a canceled context: %v, want context.Canceled", err)
	}
}

// TestStartFree: StartFree picks a port itself; the server answers there
// and is gone after Stop.
func TestStartFree(t *testing.T) {
	p, err := StartFree(context.Background(), serverPath(t), t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := Ping(p.Addr); err != nil {
		t.Errorf("PING %s: %v", p.Addr, err)
	}
	p.Stop()
	if !gone(p.Pid()) {
		t.Errorf("pid %d still runs after Stop", p.Pid())
	}
}
