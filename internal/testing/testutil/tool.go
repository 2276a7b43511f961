package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// ToolsModule is the module, relative to the repository's root, whose
// tool directives name the Go programs the tests run (toxiproxy's
// server, helm, envoyproxy/ratelimit's service_cmd) at pinned versions.
const ToolsModule = "tools"

var tools sync.Map // name -> *toolOnce

type toolOnce struct {
	once sync.Once
	path string
	err  error
}

// Tool returns the path of the executable of the tool directive name of
// tools/go.mod (the last element of its package path: "server" for
// toxiproxy's, "helm", "service_cmd"), built by go tool -n into the Go
// build cache the first time and found there afterwards. It fails t when
// the tool does not build. Nothing but the go command is needed; the
// first build downloads the tool's modules from the module proxy.
func Tool(t TB, name string) string {
	t.Helper()
	v, _ := tools.LoadOrStore(name, new(toolOnce))
	o := v.(*toolOnce)
	o.once.Do(func() { o.path, o.err = buildTool(name) })
	if o.err != nil {
		t.Fatalf("testutil.Tool(%q): %v", name, o.err)
	}
	return o.path
}

// ToolsDir returns the directory of tools/go.mod, found from the working
// directory (a test's is its package's) upwards.
func ToolsDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod := filepath.Join(dir, ToolsModule, "go.mod")
		if _, err := os.Stat(mod); err == nil {
			return filepath.Dir(mod), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no tools/go.mod in the working directory or above it")
		}
		dir = parent
	}
}

func buildTool(name string) (string, error) {
	dir, err := ToolsDir()
	if err != nil {
		return "", err
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is not in PATH: %w", err)
	}
	// A tool whose dependencies clash with the others' has a module of
	// its own, tools/NAME.
	if _, err := os.Stat(filepath.Join(dir, name, "go.mod")); err == nil {
		dir = filepath.Join(dir, name)
	}
	cmd := exec.Command(goCmd, "tool", "-n", name)
	cmd.Dir = dir
	// tools/ is no module of the workspace (go.work): its directives are
	// read from its own go.mod.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("cd %s && GOWORK=off go tool -n %s: %v\n%s", dir, name, err, stderr.String())
	}
	path := strings.TrimSpace(string(out))
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("go tool -n %s printed %q: %v", name, path, err)
	}
	return path, nil
}
