package envoy_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/policyfile"
)

// rewrite replaces the content of the file at path.
func rewrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mkdir makes the directory path and returns it.
func mkdir(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWatchFiles: WatchFiles reloads a set of files (here a directory,
// listed by envoy.ConfigFiles) when a change was made since the version
// given, when a file's content changes, and when a file appears or
// disappears; a signal reloads it too.
func TestWatchFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "sub", "b.yaml")
	if err := os.Mkdir(filepath.Dir(b), 0o700); err != nil {
		t.Fatal(err)
	}
	rewrite(t, a, "domain: a\n")
	rewrite(t, b, "domain: b\n")
	list := func() ([]string, error) { return envoy.ConfigFiles(dir) }
	since := policyfile.VersionOf(list)
	if again := policyfile.VersionOf(list); again != since {
		t.Fatal("two versions of unchanged files differ")
	}
	// A change between the version and the watch is seen at the first poll.
	rewrite(t, a, "domain: a2\n")
	reloads := make(chan string, 10)
	hup := make(chan os.Signal)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	policyfile.WatchFiles(ctx, list, since, 20*time.Millisecond, hup, func(trigger string) { reloads <- trigger })
	next := func(what string) string {
		t.Helper()
		select {
		case trigger := <-reloads:
			return trigger
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no reload within 20s", what)
			return ""
		}
	}
	if trigger := next("a change before the watch"); trigger != "file changed" {
		t.Errorf("reload of a change before the watch: trigger %q, want file changed", trigger)
	}
	c := filepath.Join(dir, "c.yaml")
	for _, step := range []struct {
		name string
		do   func()
	}{
		{"a file in a subdirectory changed", func() { rewrite(t, b, "domain: b2\n") }},
		{"a file appeared", func() { rewrite(t, c, "domain: c\n") }},
		{"a file disappeared", func() {
			if err := os.Remove(c); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		step.do()
		if trigger := next(step.name); trigger != "file changed" {
			t.Errorf("%s: trigger %q, want file changed", step.name, trigger)
		}
	}
	hup <- syscall.SIGHUP
	if trigger := next("a signal"); trigger != "signal" {
		t.Errorf("reload on a signal: trigger %q, want signal", trigger)
	}
}

// TestWatchFilesConfigMap: a directory laid out as Kubernetes mounts a
// ConfigMap (each file a link through "..data" to a "..<timestamp>"
// directory, updated by swapping the "..data" link) is reloaded when the
// link is swapped, though no listed name changed.
func TestWatchFilesConfigMap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		t.Helper()
		rewrite(t, filepath.Join(mkdir(t, filepath.Join(dir, name)), "a.yaml"), content)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_01_01_v1", "domain: a\n")
	if err := os.Symlink("..data/a.yaml", filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	list := func() ([]string, error) { return envoy.ConfigFiles(dir) }
	if files, err := list(); err != nil || len(files) != 1 {
		t.Fatalf("ConfigFiles of a ConfigMap: %v, %v; want the one link", files, err)
	}
	reloads := make(chan string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	policyfile.WatchFiles(ctx, list, policyfile.VersionOf(list), 20*time.Millisecond, nil, func(trigger string) { reloads <- trigger })
	version("..2026_01_02_v2", "domain: b\n")
	select {
	case trigger := <-reloads:
		if trigger != "file changed" {
			t.Errorf("trigger %q, want file changed", trigger)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the swap of ..data was not reloaded within 20s")
	}
}
