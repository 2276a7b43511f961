//go:build integration

package toxitest_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/internal/testing/toxitest"
)

// ping sends PING to the Redis server behind addr on a new connection and
// returns its reply line or the error, waiting at most wait.
func ping(addr string, wait time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// TestProxy: a proxy forwards to a real redis-server; a latency toxic
// delays its replies by at least the latency; a timeout toxic of 0 keeps
// the connection open without an answer (half-open); Disable cuts it off
// and Enable brings it back.
func TestProxy(t *testing.T) {
	srv := redistest.Start(t)
	tp := toxitest.Start(t)
	p := tp.Proxy(t, "redis", srv.Addr)

	if got, err := ping(p.Addr, 5*time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING through the proxy = %q, %v; want +PONG", got, err)
	}

	name := p.Add(t, toxitest.Toxic{Type: "latency", Attributes: map[string]any{"latency": 200}})
	start := time.Now()
	if got, err := ping(p.Addr, 5*time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING with latency = %q, %v; want +PONG", got, err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("PING with 200ms latency took %v, less than the latency", d)
	}
	p.Remove(t, name)

	name = p.Add(t, toxitest.Toxic{Type: "timeout", Attributes: map[string]any{"timeout": 0}})
	if got, err := ping(p.Addr, 300*time.Millisecond); err == nil {
		t.Errorf("PING through a timeout toxic = %q; want no answer", got)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Errorf("PING through a timeout toxic: %v; want a read timeout (a half-open peer)", err)
	}
	p.Remove(t, name)

	p.Disable(t)
	if got, err := ping(p.Addr, 2*time.Second); err == nil {
		t.Errorf("PING through a disabled proxy = %q; want an error", got)
	}
	p.Enable(t)
	if got, err := ping(p.Addr, 5*time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING after Enable = %q, %v; want +PONG", got, err)
	}
}
