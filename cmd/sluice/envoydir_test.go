//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// writeTree writes files (relative path -> content) under a new
// directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		writeAt(t, filepath.Join(dir, name), content)
	}
	return dir
}

// writeAt writes content to path, making its directory.
func writeAt(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// rls is a gRPC client of a daemon's Envoy rate limit service.
type rls struct {
	t      *testing.T
	client rlsv3.RateLimitServiceClient
}

// dialRLS connects to d's gRPC listener until t ends.
func dialRLS(t *testing.T, d *daemon) *rls {
	t.Helper()
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("gRPC address %q: %v", d.grpc, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rls{t: t, client: rlsv3.NewRateLimitServiceClient(conn)}
}

// ask sends one request for domain with a descriptor per entry list; an
// entry is "key=value".
func (r *rls) ask(domain string, descriptors ...[]string) *rlsv3.RateLimitResponse {
	r.t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, entries := range descriptors {
		d := &rlcommon.RateLimitDescriptor{}
		for _, e := range entries {
			k, v, _ := strings.Cut(e, "=")
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(ctx, req)
	if err != nil {
		r.t.Fatalf("ShouldRateLimit %s %v: %v", domain, descriptors, err)
	}
	return resp
}

// limitOf returns the requests_per_unit a single-descriptor request for
// domain is answered under (0: no limit applies).
func (r *rls) limitOf(domain string, entries ...string) uint32 {
	r.t.Helper()
	return r.ask(domain, entries).Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
}

// codes returns the overall code of n requests in a row.
func (r *rls) codes(n int, domain string, entries ...string) []rlsv3.RateLimitResponse_Code {
	r.t.Helper()
	out := make([]rlsv3.RateLimitResponse_Code, n)
	for i := range out {
		out[i] = r.ask(domain, entries).OverallCode
	}
	return out
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// threeFiles is a directory of envoyproxy/ratelimit files, as
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config holds them: three domains in
// three files (one in a subdirectory), and a dotted editor swap file that
// is not read (it would not load).
var threeFiles = map[string]string{
	"messaging.yaml": `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: to_number
    rate_limit: {unit: minute, requests_per_unit: 3}
`,
	"files.yaml": `
domain: files
descriptors:
  - key: path
    value: "uploads/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`,
	"teams/api.yaml": `
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 3600, algorithm: sliding_log}
  - key: internal
    rate_limit: {unlimited: true}
`,
	".messaging.yaml.swp": "domain: [not yaml",
}

// TestServeEnvoyDirectory: `sluice serve` given a directory of
// envoyproxy/ratelimit files serves every domain in it over gRPC, on
// Redis, each by its own tree; an unknown domain is answered OK, one OK
// status per descriptor, and counted.
func TestServeEnvoyDirectory(t *testing.T) {
	srv := redistest.Start(t)
	dir := writeTree(t, threeFiles)
	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", dir, "--reload-interval", "100ms")
	c := dialRLS(t, d)
	tests := []struct {
		name    string
		domain  string
		entries []string
		want    []rlsv3.RateLimitResponse_Code
	}{
		{"messaging: nested marketing limit", "messaging", []string{"message_type=marketing", "to_number=555"}, []rlsv3.RateLimitResponse_Code{ok, ok, over}},
		{"messaging: any number", "messaging", []string{"to_number=555"}, []rlsv3.RateLimitResponse_Code{ok, ok, ok, over}},
		{"messaging: no limit for another type", "messaging", []string{"message_type=alert", "to_number=555"}, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok}},
		{"files: one shared count", "files", []string{"path=uploads/a"}, []rlsv3.RateLimitResponse_Code{ok, over}},
		{"files: the shared count spent", "files", []string{"path=uploads/b"}, []rlsv3.RateLimitResponse_Code{over}},
		{"api: per address", "api", []string{"remote_address=192.0.2.1"}, []rlsv3.RateLimitResponse_Code{ok, over}},
		{"api: another address", "api", []string{"remote_address=192.0.2.2"}, []rlsv3.RateLimitResponse_Code{ok, over}},
		{"api: unlimited", "api", []string{"internal=yes"}, []rlsv3.RateLimitResponse_Code{ok, ok, ok}},
		// A domain's descriptors are its own: messaging's key in api limits nothing.
		{"api: another domain's key", "api", []string{"to_number=555"}, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok}},
	}
	for _, tt := range tests {
		got := c.codes(len(tt.want), tt.domain, tt.entries...)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if n := c.limitOf("messaging", "to_number=556"); n != 3 {
		t.Errorf("messaging to_number limit %d, want 3", n)
	}

	if text := scrapeMetrics(t, d); !strings.Contains(text, "sluice_envoy_unknown_domain_total 0") {
		t.Error("before any unknown domain, /metrics lacks sluice_envoy_unknown_domain_total 0")
	}
	resp := c.ask("billing", []string{"to_number=555"}, []string{"remote_address=192.0.2.1"})
	if resp.OverallCode != ok || len(resp.Statuses) != 2 {
		t.Fatalf("unknown domain: %v, want OK with two statuses", resp)
	}
	for i, st := range resp.Statuses {
		if st.Code != ok || st.CurrentLimit != nil {
			t.Errorf("unknown domain, status %d: %v, want OK without a limit", i, st)
		}
	}
	if text := scrapeMetrics(t, d); !strings.Contains(text, "sluice_envoy_unknown_domain_total 1") {
		t.Error("after a request for an unknown domain, /metrics lacks sluice_envoy_unknown_domain_total 1")
	}
	// The service logs the domain by name (with the daemon's logger).
	if entry := d.waitLog(t, "a domain the rate limit configuration does not have"); entry["domain"] != "billing" {
		t.Errorf("unknown domain log %v, want the domain named", entry)
	}
}

// TestServeEnvoyStartLog: the start log counts what an envoyproxy/ratelimit
// config holds, a file or a directory, and never rules=0; a directory
// with no domain starts, answers OK, and warns.
func TestServeEnvoyStartLog(t *testing.T) {
	file := writeFile(t, threeFiles["messaging.yaml"])
	tests := []struct {
		name                   string
		config                 string
		domains, limits, files float64
	}{
		{"a directory", writeTree(t, threeFiles), 3, 5, 3},
		{"one file", file, 1, 2, 1},
		{"an empty directory", t.TempDir(), 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := startServe(t, nil, "--config", tt.config)
			var entry map[string]any
			for _, line := range d.early {
				if strings.Contains(line, `"msg":"serving"`) {
					if err := json.Unmarshal([]byte(line), &entry); err != nil {
						t.Fatal(err)
					}
				}
			}
			if entry["domains"] != tt.domains || entry["limits"] != tt.limits || entry["files"] != tt.files || entry["config"] != tt.config {
				t.Errorf("start log %v, want config %s, %v domains, %v limits, %v files", entry, tt.config, tt.domains, tt.limits, tt.files)
			}
			if _, ok := entry["rules"]; ok {
				t.Errorf("start log %v counts rules of an envoyproxy/ratelimit config", entry)
			}
			if warned := d.logged("no domains"); warned != (tt.domains == 0) {
				t.Errorf("warned of no domains: %v, want %v", warned, tt.domains == 0)
			}
			if tt.domains == 0 {
				if resp := dialRLS(t, d).ask("messaging", []string{"to_number=1"}); resp.OverallCode != ok {
					t.Errorf("with no domains: %v, want OK", resp)
				}
			}
		})
	}
}

// TestServeEnvoyDirectoryReload: a directory is reloaded as a whole: two
// files changed at once both apply; a file added that does not load is
// rejected, with its file and line, and leaves the old set serving, even
// as another file changes; once it is removed the new set applies.
func TestServeEnvoyDirectoryReload(t *testing.T) {
	srv := redistest.Start(t)
	dom := func(name string, n int) string {
		return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", name, n)
	}
	dir := writeTree(t, map[string]string{"a.yaml": dom("a", 10), "sub/b.yaml": dom("b", 20)})
	a, b, bad := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "sub", "b.yaml"), filepath.Join(dir, "c.yaml")
	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", dir, "--reload-interval", "100ms")
	c := dialRLS(t, d)
	want := func(what string, na, nb uint32) {
		t.Helper()
		waitUntil(t, 20*time.Second, func() error {
			if ga, gb := c.limitOf("a", "k=x"), c.limitOf("b", "k=x"); ga != na || gb != nb {
				return fmt.Errorf("%s: limits a %d, b %d; want %d, %d", what, ga, gb, na, nb)
			}
			return nil
		})
	}
	want("at start", 10, 20)

	// Written by rename, as a ConfigMap's update or a deploy tool writes them.
	for path, content := range map[string]string{a: dom("a", 11), b: dom("b", 21)} {
		tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
		writeAt(t, tmp, content)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	want("after two files changed", 11, 21)
	entry := d.waitLog(t, "config reloaded")
	if entry["config"] != dir || entry["trigger"] != "file changed" || entry["domains"] != 2.0 || entry["files"] != 2.0 || entry["limits"] != 2.0 {
		t.Errorf("reload log %v, want config %s, trigger file changed, 2 domains, 2 files, 2 limits", entry, dir)
	}

	// A file that does not load: rejected, with its file and line.
	writeAt(t, bad, "domain: c\ndescriptors:\n  - key: k\n    rate_limits: {unit: hour}\n")
	rejected := func() {
		t.Helper()
		for {
			entry := d.waitLog(t, "config rejected")
			e, _ := entry["error"].(string)
			if entry["level"] != "ERROR" || entry["config"] != dir {
				t.Errorf("rejection log %v, want level ERROR and config %s", entry, dir)
			}
			if strings.Contains(e, bad+":4: unknown field \"rate_limits\"") {
				return
			}
		}
	}
	rejected()
	// Another file's change does not apply while the set does not load.
	writeAt(t, a, dom("a", 12))
	rejected()
	if ga, gb := c.limitOf("a", "k=x"), c.limitOf("b", "k=x"); ga != 11 || gb != 21 {
		t.Errorf("while a file is rejected: limits a %d, b %d; want the old set's 11, 21", ga, gb)
	}
	if n := c.limitOf("c", "k=x"); n != 0 {
		t.Errorf("the rejected file's domain is limited (%d)", n)
	}
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	want("after the rejected file was removed", 12, 21)
	if text := scrapeMetrics(t, d); !strings.Contains(text, `sluice_config_reloads_total{result="rejected"}`) || !strings.Contains(text, `sluice_config_reloads_total{result="ok"}`) {
		t.Errorf("/metrics lacks the reloads, ok and rejected")
	}
}

// TestServeEnvoyMergeDomains: two files of one domain are refused at
// start, naming both, unless --merge-domains (or SLUICE_MERGE_DOMAINS)
// makes their trees add up.
func TestServeEnvoyMergeDomains(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"a.yaml": "domain: shared\ndescriptors:\n  - key: one\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"b.yaml": "domain: shared\ndescriptors:\n  - key: two\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
	})
	_, stderr, code := runBinary(t, nil, "serve", "--config", dir, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, `duplicate domain "shared"`) || !strings.Contains(stderr, filepath.Join(dir, "a.yaml")) || !strings.Contains(stderr, filepath.Join(dir, "b.yaml")) {
		t.Errorf("serve of one domain in two files: exit %d, %s; want 1 and an error naming both files", code, stderr)
	}
	for _, how := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--merge-domains"}},
		{"environment", []string{"SLUICE_MERGE_DOMAINS=true"}, nil},
	} {
		t.Run(how.name, func(t *testing.T) {
			d := startServe(t, how.env, append([]string{"--config", dir}, how.args...)...)
			c := dialRLS(t, d)
			if got := c.codes(2, "shared", "one=x"); fmt.Sprint(got) != fmt.Sprint([]rlsv3.RateLimitResponse_Code{ok, over}) {
				t.Errorf("a.yaml's tree: %v, want OK then OVER_LIMIT", got)
			}
			if got := c.codes(3, "shared", "two=x"); fmt.Sprint(got) != fmt.Sprint([]rlsv3.RateLimitResponse_Code{ok, ok, over}) {
				t.Errorf("b.yaml's tree: %v, want OK, OK, OVER_LIMIT", got)
			}
		})
	}
}

// TestServeEnvoyHeaders: an envoyproxy/ratelimit config adds no response
// headers by default, as envoyproxy/ratelimit; --envoy-headers ratelimit
// adds its three, renamed by --envoy-header-names, and ietf the draft's.
func TestServeEnvoyHeaders(t *testing.T) {
	cfg := writeFile(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")
	tests := []struct {
		name string
		env  []string
		args []string
		want map[string]string // header -> a substring of its value
	}{
		{"default", nil, nil, nil},
		{"none", nil, []string{"--envoy-headers", "none"}, nil},
		{"ratelimit", nil, []string{"--envoy-headers", "ratelimit"}, map[string]string{"RateLimit-Limit": "5", "RateLimit-Remaining": "4", "RateLimit-Reset": ""}},
		{"ratelimit, renamed", []string{"SLUICE_ENVOY_HEADER_NAMES=X-Limit, X-Left,X-Reset"}, []string{"--envoy-headers", "ratelimit"},
			map[string]string{"X-Limit": "5", "X-Left": "4", "X-Reset": ""}},
		{"ietf from the environment", []string{"SLUICE_ENVOY_HEADERS=ietf"}, nil, map[string]string{"RateLimit-Policy": "q=5", "RateLimit": "r=4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := startServe(t, tt.env, append([]string{"--config", cfg}, tt.args...)...)
			resp := dialRLS(t, d).ask("d", []string{"k=x"}, []string{"j=x"})
			got := map[string]string{}
			for _, h := range resp.ResponseHeadersToAdd {
				if _, dup := got[h.Key]; dup {
					t.Errorf("header %s added twice", h.Key)
				}
				got[h.Key] = h.Value
			}
			if len(got) != len(tt.want) {
				t.Errorf("headers %v, want %d: %v", got, len(tt.want), tt.want)
			}
			for k, v := range tt.want {
				if g, ok := got[k]; !ok || !strings.Contains(g, v) {
					t.Errorf("header %s: %q (present %v), want one with %q", k, g, ok, v)
				}
			}
		})
	}
}

// TestEnvoyFlagErrors: a bad --envoy-headers or --envoy-header-names, and
// an envoyproxy/ratelimit flag given with a sluice policy file, are usage
// errors that say what is wrong.
func TestEnvoyFlagErrors(t *testing.T) {
	envoyFile := writeFile(t, "domain: d\n")
	policyFile := writeFile(t, oldRules)
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown header mode", nil, []string{"serve", "--config", envoyFile, "--envoy-headers", "draft"}, `--envoy-headers "draft" is not one of none, ratelimit or ietf`},
		{"two header names", nil, []string{"serve", "--config", envoyFile, "--envoy-header-names", "A,B"}, "want three comma-separated header names"},
		{"a header name with a space", nil, []string{"serve", "--config", envoyFile, "--envoy-header-names", "A,B C,D"}, `"B C" is not a header field name`},
		{"headers with a policy file", nil, []string{"serve", "--config", policyFile, "--envoy-headers", "ietf"}, "--envoy-headers: only for an envoyproxy/ratelimit config, and " + policyFile + " is a sluice policy file"},
		{"merge from the environment with a policy file", []string{"SLUICE_MERGE_DOMAINS=true"}, []string{"serve", "--config", policyFile}, "SLUICE_MERGE_DOMAINS: only for an envoyproxy/ratelimit config"},
		{"check: merge with a policy file", nil, []string{"check", "--config", policyFile, "--merge-domains"}, "--merge-domains: only for an envoyproxy/ratelimit config"},
	}
	// A default given again, as a shared environment may, is no error.
	if _, stderr, code := runBinary(t, []string{"SLUICE_MERGE_DOMAINS=false", "SLUICE_ENVOY_HEADERS=none"}, "check", "--config", policyFile); code != 0 {
		t.Errorf("check of a policy file with the envoy flags' defaults in the environment: exit %d, %s", code, stderr)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if args[0] == "serve" {
				// Should the error be missed, it serves on free ports.
				args = append(args, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0")
			}
			_, stderr, code := runBinary(t, tt.env, args...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
		})
	}
}

// TestCheckEnvoy: `sluice check` validates an envoyproxy/ratelimit file or
// directory as serve loads it and prints every limit with where it is
// defined; a file that does not load fails with every error, each with
// its file and line, in the envoyproxy/ratelimit format's terms.
func TestCheckEnvoy(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"a.yaml": `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: minute, unit_multiplier: 3, requests_per_unit: 10, algorithm: sliding_log, name: per_number}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
`,
		"sub/b.yaml": `
domain: files
descriptors:
  - key: path
    value: "files/*"
    share_threshold: true
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2, replaces: [{name: per_number}]}
  - key: internal
    quota_mode: true
    rate_limit: {unlimited: true}
`,
		"c.yaml": "domain: empty\n",
	})
	broken := writeFile(t, "domain: x\ndescriptors:\n  - key: a\n   rate_limit: {\n")
	unknown := writeFile(t, "domain: x\ndescriptors:\n  - key: a\n    rate_limits: {unit: second}\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	dup := writeTree(t, map[string]string{"a.yaml": "domain: x\n", "b.yaml": "domain: x\n"})
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "sub", "b.yaml")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string // lines, each holding these fields in order
		stderr []string
	}{
		{
			name: "directory",
			args: []string{"--config", dir},
			stdout: []string{
				dir + ": ok, 3 domains, 5 limits in 3 files",
				"DOMAIN DESCRIPTORS LIMIT FLAGS AT",
				"empty (no limits) - - -",
				"files path=files/* 2/second fixed_window shadow share_threshold=path replaces=per_number " + b + ":4",
				"files internal unlimited quota " + b + ":9",
				"messaging message_type=marketing, to_number 5/day fixed_window - " + a + ":7",
				"messaging to_number 10/minute x3 sliding_log name=per_number " + a + ":9",
				"messaging blocked 0/hour (every request over the limit) - " + a + ":11",
			},
		},
		{
			name:   "one file",
			args:   []string{"--config", filepath.Join(dir, "c.yaml")},
			stdout: []string{"c.yaml: ok, 1 domain, 0 limits in 1 file", "empty (no limits)"},
		},
		{
			name:   "empty directory",
			args:   []string{"--config", t.TempDir()},
			stdout: []string{"ok, 0 domains, 0 limits in 0 files", "no domains: every request is answered OK"},
		},
		{
			name:   "broken YAML",
			args:   []string{"--config", broken},
			code:   1,
			stderr: []string{broken + ":4: invalid YAML: did not find expected '-' indicator (check the indentation of this line)"},
		},
		{
			name: "unknown field and unit",
			args: []string{"--config", unknown},
			code: 1,
			stderr: []string{
				unknown + `:4: unknown field "rate_limits" in a descriptor`,
				unknown + `:5: invalid rate limit unit "fortnight"`,
			},
		},
		{
			name:   "one domain in two files",
			args:   []string{"--config", dup},
			code:   1,
			stderr: []string{`duplicate domain "x"`, filepath.Join(dup, "a.yaml"), filepath.Join(dup, "b.yaml")},
		},
		{
			name:   "one domain in two files, merged",
			args:   []string{"--config", dup, "--merge-domains"},
			stdout: []string{"ok, 1 domain, 0 limits in 2 files"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runBinary(t, nil, append([]string{"check"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			// Columns are aligned by spaces: compare words.
			var lines []string
			for _, l := range strings.Split(stdout, "\n") {
				lines = append(lines, strings.Join(strings.Fields(l), " "))
			}
			for _, want := range tt.stdout {
				found := false
				for _, l := range lines {
					found = found || strings.Contains(l, want)
				}
				if !found {
					t.Errorf("stdout lacks a line with %q:\n%s", want, stdout)
				}
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if tt.code != 0 {
				if stdout != "" {
					t.Errorf("stdout %q, want nothing", stdout)
				}
				// The envoyproxy/ratelimit parser's errors, not sluice's policy format's.
				for _, theirs := range []string{"rules", "did you mean", "period"} {
					if strings.Contains(stderr, theirs) {
						t.Errorf("stderr talks about the sluice policy format (%q):\n%s", theirs, stderr)
					}
				}
			}
		})
	}
}

// TestServeEnvoyDirectorySIGHUP: without polling, SIGHUP reloads a
// directory as a whole: a file added since the start applies.
func TestServeEnvoyDirectorySIGHUP(t *testing.T) {
	dir := writeTree(t, map[string]string{"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"})
	d := startServe(t, nil, "--config", dir, "--reload-interval", "0")
	c := dialRLS(t, d)
	writeAt(t, filepath.Join(dir, "more", "b.yaml"), "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 20}\n")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	entry := d.waitLog(t, "config reloaded")
	if entry["trigger"] != "signal" || entry["domains"] != 2.0 || entry["files"] != 2.0 {
		t.Errorf("reload log %v, want trigger signal, 2 domains, 2 files", entry)
	}
	if na, nb := c.limitOf("a", "k=x"), c.limitOf("b", "k=x"); na != 10 || nb != 20 {
		t.Errorf("after SIGHUP: limits a %d, b %d; want 10, 20", na, nb)
	}
}
