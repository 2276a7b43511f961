//go:build e2e

package docs_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/proc"
)

// TestQuickStart runs the quick start of the README and of the getting
// started guide as they are written: the serve command of their first sh
// block, on free loopback ports, and the curl of the next, four times.
// Three answers are 200 and the fourth a 429 with Retry-After, its
// denial is in sluice's log, and sluice inspect, as the guide runs it,
// says the key is denied.
func TestQuickStart(t *testing.T) {
	bin := binary(t)
	for _, guide := range []string{"README.md", "docs/getting-started.md"} {
		t.Run(guide, func(t *testing.T) {
			serve, check := quickStart(t, guide)
			httpPort, err := proc.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			grpcPort, err := proc.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", httpPort)
			args := append(serve, "--listen", addr, "--grpc-listen", fmt.Sprintf("127.0.0.1:%d", grpcPort))
			cmd := exec.Command(bin, args...)
			cmd.Dir = root
			proc.DieWithParent(cmd)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var log strings.Builder
			serving := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				sc := bufio.NewScanner(stderr)
				once := sync.Once{}
				for sc.Scan() {
					mu.Lock()
					log.WriteString(sc.Text() + "\n")
					mu.Unlock()
					if strings.Contains(sc.Text(), "msg=serving") {
						once.Do(func() { close(serving) })
					}
				}
			}()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-done
				_ = cmd.Wait()
			})
			select {
			case <-serving:
			case <-done:
				t.Fatalf("sluice %s exited:\n%s", strings.Join(args, " "), log.String())
			case <-time.After(30 * time.Second):
				t.Fatalf("sluice %s did not log serving within 30s", strings.Join(args, " "))
			}

			client := &http.Client{Timeout: 10 * time.Second}
			for i := 1; i <= 4; i++ {
				resp, err := client.Post("http://"+addr+check.path, "application/json", strings.NewReader(check.body))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := http.StatusOK
				if i == 4 {
					want = http.StatusTooManyRequests
				}
				if resp.StatusCode != want || (i == 4) != (resp.Header.Get("Retry-After") != "") {
					t.Fatalf("check %d of %s: %d (Retry-After %q) %s, want %d and Retry-After on the 429 only",
						i, check.body, resp.StatusCode, resp.Header.Get("Retry-After"), body, want)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				logged := strings.Contains(log.String(), `msg="sluice: rate limited"`)
				mu.Unlock()
				if logged {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the denial is not in sluice's log:\n%s", log.String())
				}
				time.Sleep(50 * time.Millisecond)
			}

			if guide == "docs/getting-started.md" {
				m := regexp.MustCompile("`go run ./cmd/sluice (inspect [^`]*)`").FindStringSubmatch(read(t, guide))
				if m == nil {
					t.Fatal("the guide shows no sluice inspect")
				}
				out, err := exec.Command(bin, append(strings.Fields(m[1]), "--server", "http://"+addr)...).CombinedOutput()
				if err != nil || !strings.Contains(string(out), "denied") {
					t.Errorf("sluice %s: %v\n%s\nwant it to say the key is denied", m[1], err, out)
				}
			}
		})
	}
}

// check is a decision the quick start asks for with curl.
type check struct{ path, body string }

// quickStart returns the arguments of the first `sluice serve` the guide
// shows (go run ./cmd/sluice serve ...) and the first curl check after
// it.
func quickStart(t *testing.T, guide string) ([]string, check) {
	t.Helper()
	var serve []string
	var c check
	curl := regexp.MustCompile(`curl .*localhost:8080(/v1/check) .*-d '([^']*)'`)
	for _, b := range blocks(t) {
		if b.file != guide || b.lang != "sh" {
			continue
		}
		for _, cmd := range commands(b.body) {
			f := strings.Fields(cmd)
			if serve == nil && len(f) > 3 && f[0] == "go" && f[2] == "./cmd/sluice" && f[3] == "serve" {
				serve = f[3:]
			}
			if m := curl.FindStringSubmatch(cmd); serve != nil && m != nil && c.path == "" {
				c = check{m[1], m[2]}
			}
		}
	}
	if serve == nil || c.path == "" {
		t.Fatalf("%s shows no go run ./cmd/sluice serve followed by a curl of /v1/check", guide)
	}
	return serve, c
}
