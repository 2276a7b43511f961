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

// TestVersionBinary: a go build in this checkout (-buildvcs=true, over
// any GOFLAGS) makes a binary that names the checkout's HEAD, +dirty when
// git status reports changes, and the Go version that built it.
func TestVersionBinary(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout, so go build records no revision: git rev-parse: %v", err)
	}
	// The go command finds a repository by its .git directory only; a
	// linked worktree's or a submodule's .git is a file, and its builds
	// carry no revision (golang/go#58218).
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skipf("%s/.git is not a directory (a linked worktree?): go build stamps no revision there (golang/go#58218)", strings.TrimSpace(string(top)))
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	status, err := exec.Command("git", "status", "--porcelain").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("sluice version: %v", err)
	}
	rev := "(rev " + strings.TrimSpace(string(head))[:revLen]
	if len(status) > 0 {
		rev += "+dirty"
	}
	rev += ", "
	got := string(out)
	if !strings.HasPrefix(got, "sluice ") || !strings.Contains(got, rev) || !strings.HasSuffix(got, ", "+runtime.Version()+")\n") {
		t.Errorf("sluice version printed %q, want sluice <version> %s<commit time>, %s)", got, rev, runtime.Version())
	}
}
