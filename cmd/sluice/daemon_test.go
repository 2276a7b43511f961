//go:build integration

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pollInterval is how often waitUntil asks again.
const pollInterval = 50 * time.Millisecond

// waitUntil calls cond every pollInterval until it returns nil, failing t
// with cond's last error once timeout has passed. It bounds a wait; it
// asserts no speed.
func waitUntil(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// daemon is a running `sluice serve` or `sluice proxy`.
type daemon struct {
	cmd   *exec.Cmd
	name  string        // the subcommand, for messages
	base  string        // http://host:port
	grpc  string        // host:port of the gRPC listener, if any
	early []string      // log lines up to the ready line
	done  chan struct{} // closed when it exits, after its last log line

	mu    sync.Mutex
	lines []string      // every log line (JSON), none ever dropped
	next  int           // the first line waitLog has not looked at
	added chan struct{} // a token after each new line
}

// startDaemon runs the binary with args (a subcommand and its flags), on a
// free port and with JSON logs, and waits for the log line whose msg is
// ready, which names its addresses. The process is killed when t ends.
func startDaemon(t *testing.T, ready string, env []string, args ...string) *daemon {
	t.Helper()
	return startDaemonVia(t, nil, ready, env, args...)
}

// startDaemonVia is startDaemon running the binary through via, a command
// that execs its last arguments (the binary and its flags): with
// sh -c 'ulimit -n 256; exec "$0" "$@"', under a lower limit.
func startDaemonVia(t *testing.T, via []string, ready string, env []string, args ...string) *daemon {
	t.Helper()
	flags := append([]string{args[0], "--listen", "127.0.0.1:0", "--log-format", "json"}, args[1:]...)
	argv := append(append(append([]string(nil), via...), binary), flags...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, name: args[0], done: make(chan struct{}), added: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, sc.Text())
			d.mu.Unlock()
			select {
			case d.added <- struct{}{}:
			default: // a token is already waiting
			}
		}
		_ = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.done
	})
	var entry struct {
		HTTP string `json:"http"`
		GRPC string `json:"grpc"`
	}
	line, ok := d.nextLog(30*time.Second, ready)
	if !ok {
		t.Fatalf("sluice %s did not log %q:\n%s", d.name, ready, strings.Join(d.early, "\n"))
	}
	if err := json.Unmarshal([]byte(line), &entry); err != nil {
		t.Fatal(err)
	}
	d.base, d.grpc = "http://"+entry.HTTP, entry.GRPC
	return d
}

// waitLog returns the next log line, within 10s, whose msg contains msg;
// the lines before it are passed over.
func (d *daemon) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	line, ok := d.nextLog(10*time.Second, msg)
	if !ok {
		t.Fatalf("sluice %s logged no %q within 10s or exited", d.name, msg)
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(line), &entry); err != nil {
		t.Fatal(err)
	}
	return entry
}

// nextLog looks at the log lines after the last one it returned, in order,
// for one whose msg contains msg, waiting up to timeout for more. Until the
// daemon's ready line it also keeps each line it passes in d.early. ok is
// false when the daemon exited or timeout passed first.
func (d *daemon) nextLog(timeout time.Duration, msg string) (line string, ok bool) {
	deadline := time.After(timeout)
	for {
		d.mu.Lock()
		for d.next < len(d.lines) {
			line := d.lines[d.next]
			d.next++
			if d.base == "" {
				d.early = append(d.early, line)
			}
			var entry struct {
				Msg string `json:"msg"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && strings.Contains(entry.Msg, msg) {
				d.mu.Unlock()
				return line, true
			}
		}
		d.mu.Unlock()
		select {
		case <-d.added:
		case <-d.done:
			d.mu.Lock()
			rest := d.next < len(d.lines)
			d.mu.Unlock()
			if !rest {
				return "", false
			}
		case <-deadline:
			return "", false
		}
	}
}

// logged reports whether any log line so far has a msg containing msg.
func (d *daemon) logged(msg string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, line := range d.lines {
		var entry struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && strings.Contains(entry.Msg, msg) {
			return true
		}
	}
	return false
}

// terminate sends SIGTERM and waits for the daemon to exit, failing t
// after 20s; it returns the exit code.
func (d *daemon) terminate(t *testing.T) int {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("sluice %s did not exit within 20s of SIGTERM", d.name)
	}
	return d.cmd.ProcessState.ExitCode()
}

// post sends body to the daemon's path and returns the answer, its body
// read.
func (d *daemon) post(t *testing.T, path, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(d.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// waitRule polls /v1/check for rule, keyed by ip, for up to 10s, until it
// answers 200.
func (d *daemon) waitRule(t *testing.T, rule string) {
	t.Helper()
	waitUntil(t, 10*time.Second, func() error {
		if code, _, body := d.post(t, "/v1/check", `{"rule":"`+rule+`","key":"192.0.2.1"}`); code != 200 {
			return fmt.Errorf("rule %q: last answer %d %s", rule, code, body)
		}
		return nil
	})
}

// metricsText returns d's /metrics text, within 5s.
func metricsText(d *daemon) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(d.base + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// scrapeMetrics returns d's /metrics text, failing t if it cannot.
func scrapeMetrics(t *testing.T, d *daemon) string {
	t.Helper()
	text, err := metricsText(d)
	if err != nil {
		t.Fatal(err)
	}
	return text
}
