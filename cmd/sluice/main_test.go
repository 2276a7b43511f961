//go:build integration

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// binary is the sluice binary, built once for the test run.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBinary runs the binary with args and env added to the environment, and
// returns its stdout, stderr and exit code.
func runBinary(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheck(t *testing.T) {
	valid := writeFile(t, `
rules:
  - name: login
    match: POST /api/auth/login
    limits:
      - {algorithm: sliding_window, limit: 5, period: 1m}
      - {algorithm: fixed_window, limit: 20, period: 1h}
  - {name: default, key: "header:X-API-Key", limit: 100, period: 1s, burst: 200}
  - {name: teams, key: request, limit: 10, period: 1s}
  - name: pool
    group: shedding
    key: global
    algorithm: concurrency
    limit: 1000
    priority: {from: "header:X-Priority", reserve: {critical: 20%, high: 10%}, default: bulk}
`)
	waiting := writeFile(t, "redis: {url: redis://127.0.0.1:6379, wait_replicas: 1}\nrules: [{name: a, limit: 1, period: 1s}]\n")
	invalid := writeFile(t, "rules:\n  - name: a\n    perod: 1s\n    limit: 5\n    algorithm: token-bucket\n")
	tests := []struct {
		name     string
		env      []string
		args     []string
		code     int
		stdout   []string
		stderr   []string
		noStdout bool
	}{
		{
			name: "valid file",
			args: []string{"check", "--config", valid},
			stdout: []string{
				"ok, 4 rules", "store: in-memory",
				"login-1m: sliding_window 5/1m0s AND login-1h: fixed_window 20/1h0m0s",
				"(default)", "header:X-Api-Key, missing: reject", "default-1s: token_bucket 100/1s burst 200",
				"teams       (by name)             request",
				"pool-concurrent: concurrency 1000 ttl 30s",
				"  priority  header:X-Priority",
				"critical 100%, high 80%, bulk 70%; shed 503",
			},
		},
		{
			name:   "wait_replicas",
			args:   []string{"check", "--config", waiting},
			stdout: []string{"store: redis, on_error local, timeout 100ms, wait_replicas 1 within 50ms"},
		},
		{
			name:   "file from SLUICE_CONFIG",
			env:    []string{"SLUICE_CONFIG=" + valid},
			args:   []string{"check"},
			stdout: []string{"ok, 4 rules"},
		},
		{
			name:     "every error of an invalid file, with its line",
			args:     []string{"check", "--config", invalid},
			code:     1,
			noStdout: true,
			stderr: []string{
				`rules "a": unknown field "perod" (did you mean "period"?)`,
				`rules "a".algorithm: "token-bucket" is not one of fixed_window`,
				invalid + ":5)",
			},
		},
		{
			name:   "missing file",
			args:   []string{"check", "--config", filepath.Join(t.TempDir(), "nope.yaml")},
			code:   1,
			stderr: []string{"no such file"},
		},
		{
			name:   "help",
			args:   []string{"check", "--help"},
			stdout: []string{"Usage: sluice check", "-config", "SLUICE_CONFIG"},
		},
		{
			name:   "bad flag",
			args:   []string{"check", "--nope"},
			code:   2,
			stderr: []string{"flag provided but not defined: -nope"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runBinary(t, tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			for _, want := range tt.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if tt.noStdout && stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
}

// TestCheckErrors: sluice check reports one error per mistake, a rule
// by its name (by its index when it has none), with the file and line,
// and nothing else: exactly these lines.
func TestCheckErrors(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		want       []string // the errors, file and line left out
	}{
		{"a misspelt required field", "rules:\n  - name: api\n    key: header:X-API-Key\n    limt: 5\n    period: 1s\n",
			[]string{`rules "api": unknown field "limt" (did you mean "limit"?) (%s:4)`}},
		{"a misspelt name", "rules:\n  - {name: a, match: /a, limit: 1, period: 1s}\n  - {nmae: b, match: /b, limit: 1, period: 1s}\n",
			[]string{`rules[1]: unknown field "nmae" (did you mean "name"?) (%s:3)`}},
		{"two mistakes in two rules", "rules:\n  - {name: search, match: /s, limit: 1, perod: 1s}\n  - {name: login, match: /l, algorithm: token-bucket, limit: 5, period: 1m}\n",
			[]string{
				`rules "search": unknown field "perod" (did you mean "period"?) (%s:2)`,
				`rules "login".algorithm: "token-bucket" is not one of fixed_window, sliding_window, sliding_log, token_bucket, gcra, concurrency (%s:3)`,
			}},
		{"a rule keyed by request with a match", "rules:\n  - {name: teams, key: request, match: /teams, limit: 10, period: 1s}\n",
			[]string{`rules "teams".match: a rule keyed by request takes the key its caller names (POST /v1/check, Envoy's gRPC) and is checked by name, never matched to an HTTP request; leave match out, or key the rule by ip, header:<Name>, query:<name> or global (%s:2)`}},
		{"two default rules", "rules:\n  - {name: per-ip, limit: 100, period: 1m}\n  - {name: per-key, key: header:X-Key, limit: 10, period: 1m}\n",
			[]string{`rules "per-key".match: is missing here and in rule "per-ip" (line 2): only one rule may be the default rule (the one without match) (%s:3)`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.file)
			stdout, stderr, code := runBinary(t, nil, "check", "--config", path)
			lines := make([]string, len(tt.want))
			for i, w := range tt.want {
				lines[i] = fmt.Sprintf(w, path)
			}
			if want := "sluice check: " + strings.Join(lines, "\n") + "\n"; code != 1 || stdout != "" || stderr != want {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1, no stdout, stderr:\n%s", code, stdout, stderr, want)
			}
		})
	}
}

func TestCommands(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"version"}, 0, "sluice ", ""},
		{[]string{"version", "--help"}, 0, "Usage: sluice version", ""},
		{[]string{"help"}, 0, "Commands:", ""},
		{nil, 2, "Commands:", ""},
		{[]string{"serve-all-the-things"}, 2, "", `unknown command "serve-all-the-things"`},
	}
	for _, tt := range tests {
		stdout, stderr, code := runBinary(t, nil, tt.args...)
		if code != tt.code || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
			t.Errorf("sluice %q: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tt.args, code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
		}
	}
}
