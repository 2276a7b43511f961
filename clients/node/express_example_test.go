//go:build e2e

package node_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/proc"
)

// TestExpressExample runs the README's "from zero" app as it is:
// example/app.js, with sluice.js beside it as the README says, against a
// sluice serve of example/sluice.yaml. Three logins from one address in a
// minute pass and the fourth is refused with the rate-limit headers and
// Retry-After; a search without its API key is refused 401, and with one
// it passes, its pages spending that key's count; a completion reserves
// 4096 tokens and is settled at the 1200 it used, from a header the
// client never sees.
func TestExpressExample(t *testing.T) {
	node := needNode(t)
	s := startSluice(t, buildSluice(t), true, nil, "--config", "example/sluice.yaml")

	dir := exampleDir(t, "example/app.js")
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	app := exec.Command(node, "app.js")
	app.Dir = dir
	app.Env = nodeEnv([]string{"SLUICE_URL=" + s.url, fmt.Sprintf("PORT=%d", port)})
	proc.DieWithParent(app)
	stdout, err := app.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	app.Stderr = app.Stdout
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var out strings.Builder
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "listening on ") {
				listening <- strings.TrimPrefix(sc.Text(), "listening on ")
			}
		}
		exited <- fmt.Errorf("%v\n%s", app.Wait(), out.String())
	}()
	t.Cleanup(func() {
		_ = app.Process.Kill()
		<-exited
	})
	var base string
	select {
	case base = <-listening:
	case err := <-exited:
		t.Fatalf("node app.js exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("node app.js did not say it was listening within 30s")
	}

	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path string, header http.Header) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(body)
	}

	for i := 1; i <= 4; i++ {
		resp, body := do("POST", "/api/auth/login", nil)
		want := http.StatusOK
		if i == 4 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("login %d: %d %s, want %d", i, resp.StatusCode, body, want)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"login-1m";q=3;w=60` {
			t.Errorf("login %d: RateLimit-Policy %q, want the login rule's", i, got)
		}
		if i == 4 && (resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"code":"RATE_LIMITED"`)) {
			t.Errorf("login 4: Retry-After %q, body %s: want a 429 that says when to retry", resp.Header.Get("Retry-After"), body)
		}
	}

	if resp, body := do("GET", "/api/search", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("search without X-API-Key: %d %s, want 401", resp.StatusCode, body)
	}
	resp, body := do("GET", "/api/search?pages=5", http.Header{"X-Api-Key": {"team-a"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("search of 5 pages: %d %s, want 200", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "15" {
		t.Errorf("search of 5 pages: X-RateLimit-Remaining %q, want 15 of the burst of 20", got)
	}

	// A completion, under a one-minute fixed window: if the window turns
	// between its reserve and the check of its settle, the settle cannot
	// be told, and a completion by a second key, in the new window, is.
	for _, key := range []string{"team-a", "team-b"} {
		resp, body = do("POST", "/api/complete", http.Header{"X-Api-Key": {key}})
		if resp.StatusCode != http.StatusOK || body != `{"text":"Hello!"}` {
			t.Fatalf("completion: %d %s, want 200 {\"text\":\"Hello!\"}", resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Tokens-Used"); got != "" {
			t.Errorf("completion: X-Tokens-Used %q reached the client; the middleware strips it", got)
		}
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != "95904" {
			t.Errorf("completion: X-RateLimit-Remaining %q, want 95904: admitted at the reserve of 4096", got)
		}
		if settledAt(t, s.url, "tokens", key, 100000, 1200) {
			return
		}
	}
	t.Fatal("the window turned during both completions")
}

// settledAt waits, for up to 10s, until sluice at url reports limit-used
// left under rule for key, and reports true: the middleware settles once
// the response has finished, so after the client has it. The rule is a
// fixed window: a window that turned in between has all its limit left,
// which tells nothing (a settle in the new window gives nothing back):
// settledAt then reports false.
func settledAt(t *testing.T, url, rule, key string, limit, used int) bool {
	t.Helper()
	want := limit - used
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(fmt.Sprintf(`{"rule":%q,"key":%q,"cost":0}`, rule, key)))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Remaining int `json:"remaining"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case got.Remaining == want:
			return true
		case got.Remaining == limit:
			t.Logf("%s for %s: the window turned before the check; the settle cannot be told", rule, key)
			return false
		case time.Now().After(deadline):
			t.Fatalf("%s for %s: %d left after 10s, want %d: a reservation settled at %d", rule, key, got.Remaining, want, used)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exampleDir returns a new directory holding the example script, with
// sluice.js beside it, as the README says to lay them out.
func exampleDir(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{script, "sluice.js"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
