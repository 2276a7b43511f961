//go:build integration

package redisproc_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-go/sluice/internal/testing/proc"
	"github.com/sluice-go/sluice/internal/testing/redisproc"
	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// gone reports whether pid no longer runs.
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

func TestStartStop(t *testing.T) {
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := redisproc.Start(context.Background(), redistest.Need(t), t.TempDir(), port, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := redisproc.Ping(p.Addr); err != nil {
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
	if _, err := redisproc.Start(context.Background(), redistest.Need(t), t.TempDir(), port, ""); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("Start on a taken port: %v, want an error saying the server exited", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A server told to listen on a unix socket and no TCP port never
	// answers PING and does not exit (with no socket at all it exits,
	// and Start could see either first).
	dir := t.TempDir()
	if _, err := redisproc.Start(ctx, redistest.Need(t), dir, 0, "", "--unixsocket", filepath.Join(dir, "redis.sock")); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a canceled context: %v, want context.Canceled", err)
	}
}

// TestStartFree: StartFree picks a port itself; the server answers there
// and is gone after Stop.
func TestStartFree(t *testing.T) {
	p, err := redisproc.StartFree(context.Background(), redistest.Need(t), t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := redisproc.Ping(p.Addr); err != nil {
		t.Errorf("PING %s: %v", p.Addr, err)
	}
	p.Stop()
	if !gone(p.Pid()) {
		t.Errorf("pid %d still runs after Stop", p.Pid())
	}
}
