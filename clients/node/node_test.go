//go:build e2e

// Package node_test runs the tests of sluice's Node.js client
// (clients/node/sluice.js) with node's own test runner against a real
// sluice serve, and Express as Debian packages it (node-express), with no
// npm packages.
package node_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/testing/certtest"
	"github.com/sluice-go/sluice/internal/testing/proc"
)

// debianNodePath is where Debian installs node modules such as Express
// (the node-express package).
const debianNodePath = "/usr/share/nodejs"

// minNode is the oldest Node.js the client supports: Debian 12's.
const minNode = 18

// TestNode starts sluice serve with test/sluice.yaml and runs the Node.js
// tests: test/live.test.js, test/settle.test.js (reserve and settle, by
// the client and by the Express middleware) and test/slots.test.js
// (concurrency limits: acquire, renew, release and keepAlive, by the
// client, and the middleware holding a slot while a handler runs) while
// it serves, then
// test/unreachable.test.js while it is stopped by SIGSTOP (it accepts
// connections and never answers: the client's timeout decides) and once
// it has exited (connections are refused); then test/degraded.test.js against a sluice
// serve whose Redis is down under on_error deny; then test/tls.test.js
// against a sluice serve on mutual TLS. The 429s that live.test.js saw
// must be httplimit's, byte for byte.
//
// A missing node or Express fails it (make deps installs them).
func TestNode(t *testing.T) {
	node := needNode(t)
	bin := buildSluice(t)
	s := startSluice(t, bin, true, nil)

	result := filepath.Join(t.TempDir(), "429.json")
	t.Run("live", func(t *testing.T) {
		runNode(t, node, []string{"SLUICE_URL=" + s.url, "SLUICE_RESULT_FILE=" + result}, "test/live.test.js")
		same429(t, result)
	})
	t.Run("settle", func(t *testing.T) {
		runNode(t, node, []string{"SLUICE_URL=" + s.url}, "test/settle.test.js")
	})
	t.Run("slots", func(t *testing.T) {
		runNode(t, node, []string{"SLUICE_URL=" + s.url}, "test/slots.test.js")
	})
	t.Run("hung", func(t *testing.T) {
		if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}()
		runNode(t, node, []string{"SLUICE_URL=" + s.url, "SLUICE_STATE=hung"}, "test/unreachable.test.js")
	})
	t.Run("down", func(t *testing.T) {
		s.stop(t)
		runNode(t, node, []string{"SLUICE_URL=" + s.url, "SLUICE_STATE=down"}, "test/unreachable.test.js")
	})
	t.Run("store down", func(t *testing.T) {
		// A Redis that refuses connections (nothing listens on the
		// port), under on_error deny: sluice refuses every check itself.
		port, err := proc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		s := startSluice(t, bin, false, nil, "--redis", fmt.Sprintf("redis://127.0.0.1:%d", port), "--on-error", "deny")
		runNode(t, node, []string{"SLUICE_URL=" + s.url}, "test/degraded.test.js")
	})
	t.Run("mutual TLS", func(t *testing.T) {
		// A sluice serve on mutual TLS, and the files of its CA, of a
		// client certificate it signed and of a stranger CA's.
		pki, ca := certtest.NewFilesOf(t)
		stranger := certtest.NewCA(t, "stranger CA").Client(t, "intruder")
		strangerCert, strangerKey := filepath.Join(t.TempDir(), "stranger.pem"), filepath.Join(t.TempDir(), "stranger-key.pem")
		stranger.Write(t, strangerCert, strangerKey)
		s := startSluice(t, bin, true, ca.ClientConfig(t, ca.Client(t, "probe")),
			"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-client-ca", pki.CA)
		runNode(t, node, []string{"SLUICE_URL=" + s.url, "SLUICE_TEST_CA=" + pki.CA, "SLUICE_TEST_CERT=" + pki.ClientCert, "SLUICE_TEST_KEY=" + pki.ClientKey,
			"SLUICE_TEST_STRANGER_CERT=" + strangerCert, "SLUICE_TEST_STRANGER_KEY=" + strangerKey}, "test/tls.test.js")
	})
}

// needNode returns the path of node, failing t unless it is at least
// minNode and finds Debian's Express.
func needNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (it is not in PATH): run `make deps`, which installs it, or `sudo apt-get install -y nodejs node-express`")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	m := regexp.MustCompile(`^v(\d+)\.`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("node --version printed %q, want vN.N.N", out)
	}
	if major, _ := strconv.Atoi(string(m[1])); major < minNode {
		t.Fatalf("node is %s; the client needs Node.js %d or later", strings.TrimSpace(string(out)), minNode)
	}
	cmd := exec.Command(node, "-e", "require('express')")
	cmd.Env = nodeEnv(nil)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node cannot load Express from %s (%v): run `make deps`, which installs it, or `sudo apt-get install -y node-express`\n%s", debianNodePath, err, out)
	}
	return node
}

// nodeEnv returns the environment of node: this one with extra, and
// Debian's modules in NODE_PATH.
func nodeEnv(extra []string) []string {
	path := debianNodePath
	if p := os.Getenv("NODE_PATH"); p != "" {
		path = p + string(os.PathListSeparator) + path
	}
	return append(append(os.Environ(), "NODE_PATH="+path), extra...)
}

// runNode runs node --test on files with env added, failing t with its
// output unless every test passes; under -v the output is logged anyway.
func runNode(t *testing.T, node string, env []string, files ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"--test"}, files...)...)
	cmd.Env = nodeEnv(env)
	cmd.WaitDelay = 5 * time.Second // past the bound, a test file's process holding the output is not waited for
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s: %v\n%s", strings.Join(files, " "), err, out)
	}
	if testing.Verbose() {
		t.Logf("node --test %s:\n%s", strings.Join(files, " "), out)
	}
}

// same429 fails t unless each 429 that live.test.js saved in file
// carries the status, body and body fields that
// httplimit.WriteTooManyRequests writes for its wait.
func same429(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("live.test.js saved no 429: %v", err)
	}
	var saved []struct {
		Name    string            `json:"name"`
		Wait    float64           `json:"wait"` // seconds
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	if err := json.Unmarshal(data, &saved); err != nil {
		t.Fatal(err)
	}
	if len(saved) < 2 {
		t.Fatalf("live.test.js saved %d 429s, want the middleware's and writeTooManyRequests's", len(saved))
	}
	for _, got := range saved {
		want := httptest.NewRecorder()
		httplimit.WriteTooManyRequests(want, time.Duration(got.Wait*float64(time.Second)), nil, false)
		if got.Status != want.Code || got.Body != want.Body.String() {
			t.Errorf("%s: %d %q, httplimit writes %d %q", got.Name, got.Status, got.Body, want.Code, want.Body.String())
		}
		for _, f := range []string{"Retry-After", "Content-Type", "X-Content-Type-Options", "Cache-Control"} {
			if g, w := got.Headers[strings.ToLower(f)], want.Header().Get(f); g != w {
				t.Errorf("%s: %s %q, httplimit writes %q", got.Name, f, g, w)
			}
		}
	}
}

// buildSluice builds cmd/sluice into a temporary directory.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sluice-go/sluice/cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sluice: %v\n%s", err, out)
	}
	return bin
}

// sluiceProc is a running sluice serve.
type sluiceProc struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{} // closed when it has exited
	err  error         // its Wait's, once done is closed
}

// startSluice starts bin serve with test/sluice.yaml and args on a free
// loopback port, no gRPC listener and none of this environment's SLUICE_*
// variables, and waits until it is ready (/readyz answers 200) or, when
// ready is false, until it serves (/healthz: a sluice whose store is down
// under on_error deny is never ready). With args that put it on TLS,
// tlsClient is the probe's TLS (nil: plaintext). It kills the process, by
// pid, when t ends.
func startSluice(t *testing.T, bin string, ready bool, tlsClient *tls.Config, args ...string) *sluiceProc {
	t.Helper()
	args = append([]string{"serve", "--config", "test/sluice.yaml", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--log-format", "json"}, args...)
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	proc.DieWithParent(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sluiceProc{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var entry struct {
				Msg  string `json:"msg"`
				HTTP string `json:"http"`
			}
			if json.Unmarshal(sc.Bytes(), &entry) == nil && entry.Msg == "serving" && entry.HTTP != "" {
				select {
				case addr <- entry.HTTP:
				default:
				}
			}
			select {
			case lines <- sc.Text():
			default: // the test reads the first lines only
			}
		}
		s.err = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die of SIGTERM
		_ = cmd.Process.Kill()
		<-s.done
	})
	select {
	case a := <-addr:
		s.url = "http://" + a
		if tlsClient != nil {
			s.url = "https://" + a
		}
	case <-s.done:
		t.Fatalf("sluice serve exited before serving: %v\n%s", s.err, drain(lines))
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice serve did not log \"serving\" within 30s:\n%s", drain(lines))
	}
	probe := "/readyz"
	if !ready {
		probe = "/healthz"
	}
	deadline := time.Now().Add(10 * time.Second)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsClient}}
	for {
		resp, err := client.Get(s.url + probe)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice serve at %s: %s not 200 within 10s (%v)", s.url, probe, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends sluice serve with SIGTERM, failing t unless it exits cleanly
// within 15s.
func (s *sluiceProc) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("sluice serve after SIGTERM: %v, want a clean exit", s.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("sluice serve did not exit within 15s of SIGTERM")
	}
}

// drain returns the lines waiting in c.
func drain(c chan string) string {
	var b strings.Builder
	for {
		select {
		case l := <-c:
			fmt.Fprintln(&b, l)
		default:
			return b.String()
		}
	}
}
