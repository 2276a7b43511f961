// Package nginxtest starts real nginx processes for tests: a round-robin
// load balancer in front of a set of HTTP backends, on a free loopback
// port, with every file it writes in the test's temporary directory, and
// stopped by pid when the test ends. There is no fake: a test that needs
// nginx fails, with a message saying how to install it, when nginx is
// missing. Only tests of the integration tier (//go:build integration)
// use it.
package nginxtest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/proc"
)

// ReadyPath is answered by nginx itself (204), never proxied: Start polls
// it, and a test may too, without a backend seeing the request.
const ReadyPath = "/_nginxtest/ready"

// UpstreamHeader is the response header in which nginx names the backend
// (host:port) that answered: $upstream_addr, set on every status. Were a
// request ever passed on to a second backend, it would list both,
// separated by ", ".
const UpstreamHeader = "X-Upstream"

// Server is one nginx process balancing over its backends.
type Server struct {
	// Addr is nginx's host:port on 127.0.0.1.
	Addr string
	// URL is "http://" + Addr.
	URL string

	dir    string
	cmd    *exec.Cmd
	once   sync.Once
	exited chan struct{}
}

// Start starts nginx for t as a round-robin load balancer over backends
// (host:port each) and stops it when t ends. It fails t if nginx is not
// installed or does not come up.
//
// nginx runs as a single foreground process (daemon off, master_process
// off), so its round robin is one exact rotation over the backends and
// stopping it by pid leaves no worker behind. It passes requests on with
// HTTP/1.1 keep-alive connections, the original Host, and the client
// address appended to X-Forwarded-For (and in X-Real-IP), adds
// UpstreamHeader to every response, and never retries a request on
// another backend (proxy_next_upstream off): a backend's 429 or failure
// reaches the client as it is, and no request is counted twice.
func Start(t testing.TB, backends []string) *Server {
	t.Helper()
	if len(backends) == 0 {
		t.Fatal("nginxtest: no backends")
	}
	path, err := lookPath()
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 5 {
		s, err := start(path, t.TempDir(), backends)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err // most likely the port was taken meanwhile: try another
	}
	t.Fatalf("nginxtest: %v", lastErr)
	return nil
}

// lookPath finds nginx in PATH, or in /usr/sbin, which a non-root PATH
// often lacks.
func lookPath() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	const sbin = "/usr/sbin/nginx"
	if fi, err := os.Stat(sbin); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return sbin, nil
	}
	return "", errors.New("nginx is not installed (not in PATH nor at /usr/sbin/nginx): run `make test`, which installs it, or `sudo apt-get install -y nginx`")
}

// config is nginx.conf for a balancer on port over backends, keeping every
// path in dir.
func config(dir string, port int, backends []string) string {
	var servers strings.Builder
	for _, b := range backends {
		fmt.Fprintf(&servers, "        server %s;\n", b)
	}
	return fmt.Sprintf(`# Written by nginxtest for one test; every path is under its directory.
daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;

events {
    worker_connections 1024;
}

http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;

    upstream backends {
        # round robin, the default
%[2]s        keepalive 32;
    }

    server {
        listen 127.0.0.1:%[3]d;

        location = %[4]s {
            return 204;
        }

        location / {
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_next_upstream off;
            add_header %[5]s $upstream_addr always;
        }
    }
}
`, dir, servers.String(), port, ReadyPath, UpstreamHeader)
}

func start(path, dir string, backends []string) (*Server, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(config(dir, port, backends)), 0o600); err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &Server{Addr: addr, URL: "http://" + addr, dir: dir}
	// -e: the error log from the first line on, before the configuration
	// names it (the compiled-in default may be under /var/log).
	s.cmd = exec.Command(path, "-c", conf, "-p", dir, "-e", filepath.Join(dir, "error.log"))
	out := new(strings.Builder)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	proc.DieWithParent(s.cmd) // a test binary killed by its timeout leaves no nginx
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(exited) }()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return nil, fmt.Errorf("nginx on port %d exited: %s%s", port, out, s.ErrorLog())
		default:
		}
		if resp, err := client.Get(s.URL + ReadyPath); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				s.exited = exited
				return s, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = s.cmd.Process.Kill()
	<-exited
	return nil, fmt.Errorf("nginx on port %d did not answer %s within 10s: %s%s", port, ReadyPath, out, s.ErrorLog())
}

// ErrorLog returns what nginx has written to its error log so far, for a
// failing test's message.
func (s *Server) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "error.log"))
	return string(b)
}

// Stop asks nginx (by its pid) to shut down, kills it if it has not
// exited within 5 seconds, and waits for it. It is safe to call more than
// once.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
}
