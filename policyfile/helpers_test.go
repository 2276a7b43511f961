package policyfile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/testutil"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/policyfile"
)

// writeFile writes content to a fresh policy file and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	rewrite(t, path, content)
	return path
}

// rewrite replaces the content of the file at path.
func rewrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// replace replaces the file at path with one holding content, by rename,
// as editors and Kubernetes do: a poll never sees it half written.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	rewrite(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// open opens the policy file at path, logging to log (nil: nowhere), and
// closes it when t ends.
func open(t *testing.T, path string, log *logs, opts ...policyfile.Option) *policyfile.Policy {
	t.Helper()
	l := slog.New(slog.DiscardHandler)
	if log != nil {
		l = log.logger()
	}
	p, err := policyfile.Open(path, append([]policyfile.Option{policyfile.WithLogger(l)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// check asks p's engine for one decision of rule for the client key.
func check(t *testing.T, p *policyfile.Policy, rule, key string) *policy.Decision {
	t.Helper()
	d, err := p.Engine().Check(context.Background(), policy.Check{Rule: rule, Key: key})
	if err != nil {
		t.Fatalf("Check(%s, %s): %v", rule, key, err)
	}
	return d
}

// waitFor calls cond until it returns nil, failing t with its last error
// after 20s (testutil.WaitFor). It bounds a wait; it asserts no speed.
func waitFor(t *testing.T, cond func() error) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, cond)
}

// waitRule waits until p decides under a rule called name.
func waitRule(t *testing.T, p *policyfile.Policy, name string) {
	t.Helper()
	waitFor(t, func() error {
		if p.Engine().Rules().Rule(name) == nil {
			return fmt.Errorf("no rule %q after the file changed", name)
		}
		return nil
	})
}

// logs collects JSON log records, safe for concurrent use.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// entries returns the records so far whose msg contains msg.
func (l *logs) entries(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m, _ := e["msg"].(string); strings.Contains(m, msg) {
			out = append(out, e)
		}
	}
	return out
}

// waitLog waits for a record whose msg contains msg and returns the first.
func (l *logs) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	var e map[string]any
	waitFor(t, func() error {
		if es := l.entries(t, msg); len(es) > 0 {
			e = es[0]
			return nil
		}
		return fmt.Errorf("nothing logged saying %q", msg)
	})
	return e
}
