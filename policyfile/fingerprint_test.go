package policyfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFingerprint: a touch leaves the policy file's fingerprint as it
// was, so it reloads nothing; a change of content, even of the same size,
// changes it.
func TestFingerprint(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("rules:\n  - {name: old, key: ip, limit: 100, period: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := fingerprintOf(cfg)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(cfg, later, later); err != nil {
		t.Fatal(err)
	}
	if after := fingerprintOf(cfg); after != before {
		t.Errorf("touch changed the fingerprint: %+v, then %+v", before, after)
	}
	if err := os.WriteFile(cfg, []byte("rules:\n  - {name: new, key: ip, limit: 100, period: 1m}\n"), 0o600); err != nil { // same size
		t.Fatal(err)
	}
	if after := fingerprintOf(cfg); after == before {
		t.Error("new content of the same size left the fingerprint as it was")
	}
	if missing := fingerprintOf(cfg + ".gone"); missing.err == "" || missing == before {
		t.Errorf("a missing file's fingerprint %+v, want one with an error", missing)
	}
}

// TestFilesFingerprint: a set's fingerprint stays as it was when its
// files are touched, and changes when a file's content changes, when a
// file appears, disappears or is renamed, whatever order the list comes
// in; a list that fails has a fingerprint of its own.
func TestFilesFingerprint(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	list := func() ([]string, error) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		var files []string
		for i := len(entries) - 1; i >= 0; i-- { // reversed: the order must not matter
			files = append(files, filepath.Join(dir, entries[i].Name()))
		}
		return files, nil
	}
	write("a.yaml", "domain: a\n")
	write("b.yaml", "domain: b\n")
	first := filesFingerprint(list)
	sorted := func() ([]string, error) {
		return []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")}, nil
	}
	if fp := filesFingerprint(sorted); fp != first {
		t.Error("the same files listed in another order changed the fingerprint")
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "b.yaml"), later, later); err != nil {
		t.Fatal(err)
	}
	if fp := filesFingerprint(list); fp != first {
		t.Error("touching a file changed the set's fingerprint")
	}
	prev := first
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"a file's content changed, same size", func() error {
			return os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: c\n"), 0o600)
		}},
		{"a file appeared", func() error { return os.WriteFile(filepath.Join(dir, "c.yaml"), nil, 0o600) }},
		{"a file was renamed", func() error {
			return os.Rename(filepath.Join(dir, "c.yaml"), filepath.Join(dir, "d.yaml"))
		}},
		{"a file disappeared", func() error { return os.Remove(filepath.Join(dir, "d.yaml")) }},
	} {
		if err := step.do(); err != nil {
			t.Fatal(err)
		}
		fp := filesFingerprint(list)
		if fp == prev {
			t.Errorf("%s: the fingerprint stayed as it was", step.name)
		}
		prev = fp
	}
	failing := filesFingerprint(func() ([]string, error) { return nil, os.ErrNotExist })
	if failing.err == "" || failing == first {
		t.Errorf("a failed list's fingerprint %+v, want one with an error", failing)
	}
}
