// Package toxitest starts a real toxiproxy server (Shopify's TCP proxy for
// simulating network faults) for tests, puts proxies between a program and
// the servers it talks to, and adds toxics to them: latency with jitter, a
// connection that stops answering, resets, a slow link, a reply cut into
// pieces. It talks to the server over its HTTP API; there is no fake.
//
// The server binary is toxiproxy's cmd/server at the version of the
// tool directive in tools/go.mod, built by go tool into the Go build
// cache (testutil.Tool) the first time a test needs it: nothing but Go is
// needed.
package toxitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/proc"
	"github.com/sluice-go/sluice/internal/testing/testutil"
)

// startTimeout bounds how long Start waits for the server's API.
const startTimeout = 10 * time.Second

// Server is one toxiproxy server process.
type Server struct {
	// API is the base URL of its HTTP API, http://127.0.0.1:port.
	API string

	cmd    *exec.Cmd
	out    bytes.Buffer
	once   sync.Once
	exited chan struct{}
}

// Need returns the path of the toxiproxy server for t, building it the
// first time (testutil.Tool).
func Need(t testing.TB) string {
	t.Helper()
	return testutil.Tool(t, "server")
}

// Start starts a toxiproxy server for t on a free loopback port and stops
// it, by pid, when t ends. It fails t when the server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	path := Need(t)
	var lastErr error
	for range 5 { // a free port may be taken before the server binds it
		port, err := proc.FreePort()
		if err != nil {
			t.Fatalf("toxitest: %v", err)
		}
		s, err := start(path, port)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	t.Fatalf("toxitest: %v", lastErr)
	return nil
}

func start(path string, port int) (*Server, error) {
	s := &Server{API: "http://127.0.0.1:" + strconv.Itoa(port), exited: make(chan struct{})}
	s.cmd = exec.Command(path, "-host", "127.0.0.1", "-port", strconv.Itoa(port))
	s.cmd.Stdout, s.cmd.Stderr = &lockedWriter{w: &s.out}, &lockedWriter{w: &s.out}
	proc.DieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("toxiproxy exited at start: %s", s.output())
		default:
		}
		if err := s.call(http.MethodGet, "/version", nil, nil); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("toxiproxy did not answer within %v: %v; output: %s", startTimeout, err, s.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server by its pid and waits for it to exit; its proxies
// close with it. It may be called more than once.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
	})
}

// Proxy creates a proxy named name that listens on a free loopback port
// and forwards every connection to upstream (host:port), and removes it
// when t ends.
func (s *Server) Proxy(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	var got struct {
		Listen string `json:"listen"`
	}
	body := map[string]any{"name": name, "listen": "127.0.0.1:0", "upstream": upstream, "enabled": true}
	if err := s.call(http.MethodPost, "/proxies", body, &got); err != nil {
		t.Fatalf("toxitest: create proxy %s to %s: %v", name, upstream, err)
	}
	p := &Proxy{Name: name, Addr: got.Listen, Upstream: upstream, s: s}
	t.Cleanup(func() { _ = s.call(http.MethodDelete, "/proxies/"+name, nil, nil) })
	return p
}

// Proxy is one proxy of a Server.
type Proxy struct {
	// Name names it in the server's API.
	Name string
	// Addr is the host:port it listens on: what the program under test
	// dials in place of Upstream.
	Addr string
	// Upstream is the host:port it forwards to.
	Upstream string

	s *Server
}

// A Toxic is a fault a proxy applies to the bytes it forwards. Type and
// Attributes are toxiproxy's (https://github.com/Shopify/toxiproxy#toxics):
//
//	latency      latency, jitter (ms): each chunk delayed latency ± jitter
//	timeout      timeout (ms): data stops; the connection closes after
//	             timeout, or never with 0 (a half-open peer)
//	reset_peer   timeout (ms): the connection is reset (TCP RST) after it
//	bandwidth    rate (KB/s)
//	slicer       average_size, size_variation (bytes), delay (µs): data cut
//	             into small chunks
//	slow_close   delay (ms)
//	limit_data   bytes: the connection closes after that many
type Toxic struct {
	// Name names the toxic in the proxy; empty: Type_Stream.
	Name string `json:"name,omitempty"`
	// Type is the toxic's kind, one of the above.
	Type string `json:"type"`
	// Stream is "downstream" (server to client, the default) or
	// "upstream" (client to server).
	Stream string `json:"stream,omitempty"`
	// Toxicity is the share of connections it applies to; 0 means 1 (all).
	Toxicity float64 `json:"toxicity"`
	// Attributes are the toxic's parameters.
	Attributes map[string]any `json:"attributes"`
}

// Add adds toxic to the proxy and returns its name, failing t when the
// server refuses it. Only connections that carry data afterwards feel it;
// latency, bandwidth and slicer apply to open connections too.
func (p *Proxy) Add(t testing.TB, toxic Toxic) string {
	t.Helper()
	if toxic.Toxicity == 0 {
		toxic.Toxicity = 1
	}
	var got struct {
		Name string `json:"name"`
	}
	if err := p.s.call(http.MethodPost, "/proxies/"+p.Name+"/toxics", toxic, &got); err != nil {
		t.Fatalf("toxitest: add %s toxic to %s: %v", toxic.Type, p.Name, err)
	}
	return got.Name
}

// Remove removes the toxic named name from the proxy.
func (p *Proxy) Remove(t testing.TB, name string) {
	t.Helper()
	if err := p.s.call(http.MethodDelete, "/proxies/"+p.Name+"/toxics/"+name, nil, nil); err != nil {
		t.Fatalf("toxitest: remove toxic %s from %s: %v", name, p.Name, err)
	}
}

// Disable closes every connection of the proxy and refuses new ones: the
// upstream is cut off (a partition) until Enable.
func (p *Proxy) Disable(t testing.TB) { t.Helper(); p.setEnabled(t, false) }

// Enable lets the proxy accept connections again after Disable.
func (p *Proxy) Enable(t testing.TB) { t.Helper(); p.setEnabled(t, true) }

func (p *Proxy) setEnabled(t testing.TB, on bool) {
	t.Helper()
	if err := p.s.call(http.MethodPost, "/proxies/"+p.Name, map[string]any{"enabled": on}, nil); err != nil {
		t.Fatalf("toxitest: set %s enabled=%v: %v", p.Name, on, err)
	}
}

// apiTimeout bounds each call to the server's API.
const apiTimeout = 5 * time.Second

// call sends body (JSON, unless nil) to the API and decodes its reply into
// out, unless nil.
func (s *Server) call(method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.API+path, r)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (s *Server) output() string {
	outMu.Lock()
	defer outMu.Unlock()
	return s.out.String()
}

// outMu guards every Server's output buffer (written by its process's
// copying goroutines, read on failure).
var outMu sync.Mutex

type lockedWriter struct{ w io.Writer }

func (l *lockedWriter) Write(p []byte) (int, error) {
	outMu.Lock()
	defer outMu.Unlock()
	return l.w.Write(p)
}
