//go:build integration

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	const rev = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{
			{Key: "-compiler", Value: "gc"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-01T09:00:00Z"},
			{Key: "vcs.modified", Value: modified},
		}
	}
	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "sluice (unknown build)"},
		{
			"tagged release",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: vcs("false")},
			"sluice v0.3.0 (rev 1a2b3c4d5e6f, 2026-12-01T09:00:00Z, go1.26.8)",
		},
		{
			"checkout with changes",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")},
			"sluice (devel) (rev 1a2b3c4d5e6f+dirty, 2026-12-01T09:00:00Z, go1.26.8)",
		},
		{
			"pseudo-version stamped by go build",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201090000-1a2b3c4d5e6f+dirty"}, Settings: vcs("true")},
			"sluice v0.0.0-20261201090000-1a2b3c4d5e6f+dirty (rev 1a2b3c4d5e6f+dirty, 2026-12-01T09:00:00Z, go1.26.8)",
		},
		{
			"go install from the module proxy: no vcs settings",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{{Key: "-compiler", Value: "gc"}}},
			"sluice v0.3.0 (go1.26.8)",
		},
		{
			"no version, a short revision, no time",
			&debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}},
			"sluice (devel) (rev abc123, go1.26.8)",
		},
		{"nothing recorded", &debug.BuildInfo{}, "sluice (devel)"},
	}
	for _, tt := range tests {
		if got := version(tt.info); got != tt.want {
			t.Errorf("%s: version() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestVersionBinary: a go build in a git checkout (-buildvcs=true, over
// any GOFLAGS) makes a binary that names the checkout's HEAD, +dirty once
// a tracked file changes, and the Go version that built it. The checkout
// is one of its own: this module's files committed to a new repository,
// so that the test runs the same in a clone, a linked worktree (whose
// .git is a file, and whose builds carry no revision: golang/go#58218) or
// an unpacked archive.
func TestVersionBinary(t *testing.T) {
	repo := t.TempDir()
	copyModule(t, repo)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=sluice", "-c", "user.email=sluice@example.com"}, args...)...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "version test")
	head := git("rev-parse", "HEAD")

	printed := func() string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "sluice")
		build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/sluice")
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
		}
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("sluice version: %v", err)
		}
		return string(out)
	}
	for _, dirty := range []bool{false, true} {
		if dirty {
			if err := os.WriteFile(filepath.Join(repo, "go.mod"), append(readFile(t, filepath.Join(repo, "go.mod")), "\n// changed\n"...), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		rev := "(rev " + head[:revLen]
		if dirty {
			rev += "+dirty"
		}
		rev += ", "
		got := printed()
		if !strings.HasPrefix(got, "sluice ") || !strings.Contains(got, rev) || !strings.HasSuffix(got, ", "+runtime.Version()+")\n") {
			t.Errorf("sluice version printed %q, want sluice <version> %s<commit time>, %s)", got, rev, runtime.Version())
		}
	}
}

// copyModule copies this module's source (its root is two directories up)
// to dir: every file but those under .git and bench (a module of its own),
// and files over 1 MiB (a binary left by a build).
func copyModule(t *testing.T, dir string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == ".git" && !d.IsDir() {
			// A linked worktree's .git is a file naming its git directory:
			// copied, the test's git init and commit would go to this
			// checkout's branch.
			return nil
		}
		if d.IsDir() {
			if rel == ".git" || rel == "bench" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		info, err := d.Info()
		if err != nil || !info.Mode().IsRegular() || info.Size() > 1<<20 {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), readFile(t, path), 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
