package envoy

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// write writes files (name: content) under dir, making directories.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func limitsFile(domain, key string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: " + key + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
}

func TestLoadDirectory(t *testing.T) {
	cfg, err := LoadConfig("testdata/upstream")
	if err != nil {
		t.Fatal(err)
	}
	var domains []string
	for name := range cfg.Domains {
		domains = append(domains, name)
	}
	slices.Sort(domains)
	if want := []string{"another", "basic", "files", "tiers"}; !slices.Equal(domains, want) {
		t.Errorf("domains %v, want %v (the dotted swap file skipped)", domains, want)
	}
	if len(cfg.Files) != 4 || !strings.HasSuffix(cfg.Files[0], "another.yaml") {
		t.Errorf("files %v", cfg.Files)
	}
	paths := cfg.Limits()
	var got []string
	for _, p := range paths {
		if p.Domain == "files" {
			got = append(got, p.String())
		}
	}
	if want := []string{"path=shared/*", "path=own/*", "bucket=b*, op"}; !slices.Equal(got, want) {
		t.Errorf("files limits %q, want %q", got, want)
	}
	if len(paths) != 8+4+3+3 {
		t.Errorf("%d limits, want 18", len(paths))
	}
}

// TestConfigFilesConfigMap: a Kubernetes ConfigMap volume holds each file
// twice, as a link and in a dotted directory; a directory of its own
// holds more files; only the links and the subdirectory's files are read.
func TestConfigFilesConfigMap(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"..2026_12_01_00_00_00.1/a.yaml": limitsFile("a", "k"),
		"..2026_12_01_00_00_00.1/b.yaml": limitsFile("b", "k"),
		"team/c.yaml":                    limitsFile("c", "k"),
		".hidden.yaml":                   "not: [yaml",
	})
	for _, link := range [][2]string{{"..data", "..2026_12_01_00_00_00.1"}, {"a.yaml", "..data/a.yaml"}, {"b.yaml", "..data/b.yaml"}, {"linked-dir", "team"}} {
		if err := os.Symlink(link[1], filepath.Join(dir, link[0])); err != nil {
			t.Fatal(err)
		}
	}
	files, err := ConfigFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "team/c.yaml")}
	if !slices.Equal(files, want) {
		t.Errorf("ConfigFiles = %q, want %q", files, want)
	}
	cfg, err := LoadConfig(dir)
	if err != nil || len(cfg.Domains) != 3 {
		t.Fatalf("LoadConfig = %v, %v; want 3 domains", cfg, err)
	}
}

func TestLoadDirectoryErrors(t *testing.T) {
	t.Run("every file's errors", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{
			"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    vaule: x\n",
			"b.yaml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			"c.yaml": limitsFile("c", "k"),
		})
		_, err := LoadConfig(dir)
		for _, want := range []string{"a.yaml:4: unknown field \"vaule\"", "b.yaml:4: invalid rate limit unit \"fortnight\""} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want it to hold %q", err, want)
			}
		}
	})
	t.Run("duplicate domain names both files", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"a.yaml": limitsFile("d", "k1"), "b.yaml": limitsFile("d", "k2")})
		_, err := LoadConfig(dir)
		if err == nil || !strings.Contains(err.Error(), "b.yaml: duplicate domain \"d\", also defined in "+filepath.Join(dir, "a.yaml")) {
			t.Errorf("error %v", err)
		}
		cfg, err := LoadConfig(dir, MergeDomains())
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Match("d", []Entry{{"k1", "x"}}) == nil || cfg.Match("d", []Entry{{"k2", "x"}}) == nil {
			t.Error("merged domain lacks a file's descriptors")
		}
	})
	t.Run("merged duplicate descriptor", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"a.yaml": limitsFile("d", "k"), "b.yaml": limitsFile("d", "k")})
		_, err := LoadConfig(dir, MergeDomains())
		if err == nil || !strings.Contains(err.Error(), "b.yaml:3: duplicate descriptor") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("empty directory", func(t *testing.T) {
		cfg, err := LoadConfig(t.TempDir())
		if err != nil || len(cfg.Domains) != 0 {
			t.Errorf("LoadConfig(empty) = %v, %v; want no domains", cfg, err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := LoadConfig(filepath.Join(t.TempDir(), "nope")); err == nil {
			t.Error("no error")
		}
	})
}

// TestUpstreamFileRules: what envoyproxy/ratelimit loads loads, and what
// it refuses is refused, with the line.
func TestUpstreamFileRules(t *testing.T) {
	loads := []string{
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: fortnight}\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: a*\n    share_threshold: true\n    quota_mode: true\n    rate_limit: {unit: Month, requests_per_unit: 5}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, unit: year, requests_per_unit: 5, replaces: [{name: b}]}\n",
		"domain: d\n", // no descriptors
	}
	for _, y := range loads {
		if _, err := ParseConfig("f.yaml", []byte(y)); err != nil {
			t.Errorf("ParseConfig(%q): %v", y, err)
		}
	}
	refused := []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, unit: second, requests_per_unit: 1, replaces: [{name: a}]}\n", `f.yaml:4: rate limit "a" replaces itself`},
		{"domain: d\ndescriptors:\n  - key: k\n    value: a\n    share_threshold: true\n", `f.yaml:5: share_threshold can only be used with a wildcard value`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n", `f.yaml:4: replaces entry has no name`},
		{"domain: d\ndescriptors:\n  - key: k\n    quota_mode: yes please\n", `f.yaml:4: quota_mode must be true or false`},
	}
	for _, tc := range refused {
		if _, err := ParseConfig("f.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q) = %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestIsConfig(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"envoy.yaml":   limitsFile("d", "k"),
		"broken.yaml":  "domain: d\ndescriptors:\n  - key: [k\n",
		"only.yaml":    "descriptors: []\n",
		"sluice.yaml":  "rules:\n  - {name: r, limit: 1, period: 1s}\n",
		"sbroken.yaml": "rules:\n  - {name: r\n",
	})
	for name, want := range map[string]bool{"envoy.yaml": true, "broken.yaml": true, "only.yaml": true, "sluice.yaml": false, "sbroken.yaml": false, "missing.yaml": false} {
		if got := IsConfig(filepath.Join(dir, name)); got != want {
			t.Errorf("IsConfig(%s) = %v, want %v", name, got, want)
		}
	}
	if !IsConfig(dir) {
		t.Error("IsConfig(directory) = false")
	}
}

// TestYAMLAnchors: anchors, aliases and merge keys apply, as in
// upstream's YAML library; an alias bomb is refused, not expanded.
func TestYAMLAnchors(t *testing.T) {
	cfg, err := ParseConfig("f.yaml", []byte(`
domain: d
descriptors:
  - key: a
    rate_limit: &std {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: *std
  - key: c
    rate_limit:
      <<: *std
      requests_per_unit: 7
  - &leaf
    key: e
    value: ~
    rate_limit: {unit: second, requests_per_unit: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want uint32
	}{{"a", 5}, {"b", 5}, {"c", 7}, {"e", 2}} {
		d := cfg.Match("d", []Entry{{tc.key, "x"}})
		if d == nil || d.RateLimit.RequestsPerUnit != tc.want || d.RateLimit.Unit != "minute" && tc.key != "e" {
			t.Errorf("%s: %+v, want %d per minute", tc.key, d, tc.want)
		}
	}
	// Each level holds the one below twice: 2^40 nodes in all.
	bomb := "domain: d\ndescriptors:\n  - key: top\n    descriptors: &x0 [{key: k}]\n"
	for i := 1; i < 40; i++ {
		bomb += "  - key: t" + strconv.Itoa(i) + "\n    descriptors: &x" + strconv.Itoa(i) + " [{key: a, descriptors: *x" + strconv.Itoa(i-1) + "}, {key: b, descriptors: *x" + strconv.Itoa(i-1) + "}]\n"
	}
	if _, err := ParseConfig("bomb.yaml", []byte(bomb)); err == nil || !strings.Contains(err.Error(), "expands to more than") {
		t.Errorf("alias bomb: %v", err)
	}
}
