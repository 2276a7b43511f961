//go:build e2e

package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// tools are the programs a guide's shell block may run that no test here
// checks further: other projects' commands, shown as their users type
// them.
var tools = map[string]bool{
	"apt-get": true, "cat": true, "cd": true, "curl": true, "docker": true, "echo": true,
	"envoy": true, "export": true, "git": true, "helm": true, "kubectl": true, "node": true,
	"npm": true, "openssl": true, "podman": true, "printf": true, "redis-cli": true,
	"redis-server": true, "systemctl": true, "ulimit": true, "install": true, "groupadd": true,
	"useradd": true, "mkdir": true, "chown": true, "chmod": true, "cp": true, "sudo": true, "tee": true,
}

// TestShellBlocks: every command of a guide's sh block works as shown, as
// far as can be told without running it: a sluice command exists and
// takes each flag it is given (its --help lists them), and sluice check
// accepts the file it is given; a make target is in the Makefile; go run
// names a directory of the repository; go test names packages that exist
// and a -run or -bench pattern that matches one of their functions; go get
// and go install name this module's packages; go build names a directory
// of the repository.
func TestShellBlocks(t *testing.T) {
	bin := binary(t)
	for _, b := range blocks(t) {
		if b.lang != "sh" {
			continue
		}
		for _, cmd := range commands(b.body) {
			for _, c := range strings.Split(cmd, "&&") {
				if err := checkCommand(t, bin, strings.Fields(c)); err != "" {
					t.Errorf("%s: %q: %s", b, strings.TrimSpace(c), err)
				}
			}
		}
	}
}

// commands returns a shell block's commands: comments dropped, lines
// continued by '\' joined, a leading "$ " prompt removed.
func commands(body string) []string {
	var out []string
	cur := ""
	prompted := strings.HasPrefix(body, "$ ") || strings.Contains(body, "\n$ ")
	for _, line := range strings.Split(body, "\n") {
		if prompted && !strings.HasPrefix(line, "$ ") && cur == "" {
			continue // a session: the lines after a command are its output
		}
		if i := strings.Index(line, " #"); i >= 0 && !strings.Contains(line[:i], "'") {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur += cont + " "
			continue
		}
		cur += line
		if cur = strings.TrimSpace(strings.TrimPrefix(cur, "$ ")); cur != "" {
			out = append(out, cur)
		}
		cur = ""
	}
	return out
}

var envRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

func checkCommand(t *testing.T, bin string, args []string) string {
	for len(args) > 0 && envRE.MatchString(args[0]) {
		args = args[1:] // VAR=value before the command
	}
	if len(args) == 0 {
		return ""
	}
	switch {
	case args[0] == "sluice":
		return checkSluice(t, bin, args[1:])
	case args[0] == "go" && len(args) > 2 && args[1] == "run" && args[2] == "./cmd/sluice":
		return checkSluice(t, bin, args[3:])
	case args[0] == "go" && len(args) > 2 && args[1] == "run":
		return checkDir(args[2])
	case args[0] == "go" && len(args) > 1 && args[1] == "test":
		return checkGoTest(args[2:])
	case args[0] == "go" && len(args) > 2 && (args[1] == "get" || args[1] == "install"):
		pkg, _, _ := strings.Cut(args[2], "@")
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok {
			return "names a package of another module"
		}
		return checkDir("." + rel)
	case args[0] == "go" && len(args) > 2 && args[1] == "build":
		return checkDir(args[len(args)-1])
	case args[0] == "go" && len(args) > 1 && (args[1] == "doc" || args[1] == "vet"):
		for _, a := range args[2:] {
			if strings.HasPrefix(a, "./") {
				return checkDir(strings.TrimSuffix(a, "/..."))
			}
		}
		return ""
	case args[0] == "make":
		for _, target := range args[1:] {
			if strings.HasPrefix(target, "-") || strings.Contains(target, "=") {
				continue
			}
			if !makeTargets(t)[target] {
				return "the Makefile has no target " + target
			}
		}
		return ""
	case args[0] == "curl":
		return checkCurl(t, args[1:])
	case tools[args[0]]:
		return ""
	}
	return "a command no test checks: check it in docs/shell_test.go, or list the tool there"
}

var serveURL = regexp.MustCompile(`^(?:https?://)?localhost:8080(/[^?'"\s]*)`)

// checkCurl: a URL of sluice serve's default listener names a path of
// its OpenAPI document (docs/openapi.yaml, which TestOpenAPIRoutes holds
// to the routes served).
func checkCurl(t *testing.T, args []string) string {
	for _, a := range args {
		m := serveURL.FindStringSubmatch(strings.Trim(a, `'"`))
		if m == nil {
			continue
		}
		doc := read(t, "docs/openapi.yaml")
		if !strings.Contains(doc, "\n  "+m[1]+":\n") {
			return "sluice serve has no endpoint " + m[1] + " (it is not in docs/openapi.yaml)"
		}
	}
	return ""
}

// checkDir: a directory of the repository, relative to its root.
func checkDir(dir string) string {
	if fi, err := os.Stat(filepath.Join(root, dir)); err != nil || !fi.IsDir() {
		return dir + " is not a directory of the repository"
	}
	return ""
}

var flagRE = regexp.MustCompile(`(?m)^\s+-([a-z0-9-]+)`)

// helps caches each sluice command's flags, read from its --help.
var helps sync.Map

func checkSluice(t *testing.T, bin string, args []string) string {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return "" // sluice --help
	}
	sub := args[0]
	flags, ok := helps.Load(sub)
	if !ok {
		out, _ := exec.Command(bin, sub, "--help").CombinedOutput()
		if !strings.Contains(string(out), "Usage: sluice "+sub) {
			return "sluice has no command " + sub
		}
		m := map[string]bool{"help": true}
		for _, f := range flagRE.FindAllStringSubmatch(string(out), -1) {
			m[f[1]] = true
		}
		helps.Store(sub, m)
		flags = m
	}
	var config string
	for i, a := range args[1:] {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !flags.(map[string]bool)[name] {
			return "sluice " + sub + " has no flag --" + name
		}
		if name == "config" && i+2 < len(args) {
			config = args[i+2]
		}
	}
	if sub == "check" && config != "" {
		cmd := exec.Command(bin, "check", "--config", config)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "sluice check fails: " + err.Error() + "\n" + string(out)
		}
	}
	return ""
}

var (
	targetsOnce sync.Once
	targets     map[string]bool
)

// makeTargets returns the Makefile's targets.
func makeTargets(t *testing.T) map[string]bool {
	targetsOnce.Do(func() {
		targets = map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9_-]*):`).FindAllStringSubmatch(read(t, "Makefile"), -1) {
			targets[m[1]] = true
		}
	})
	return targets
}

var funcRE = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)

// checkGoTest: the packages exist, and a -run, -bench or -fuzz pattern
// matches a function of one of them (each of its top-level alternatives
// does, for the part before a '/').
func checkGoTest(args []string) string {
	var pkgs, patterns []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-run" || a == "-bench" || a == "-fuzz":
			if i+1 < len(args) {
				patterns = append(patterns, strings.Trim(args[i+1], `'"`))
				i++
			}
		case strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && !strings.HasPrefix(args[i+1], "./") && args[i+1] != ".":
			i++ // a flag's value: -count 10, -benchtime 1x
		case strings.HasPrefix(a, "./") || a == ".":
			pkgs = append(pkgs, a)
		}
	}
	var names []string
	for _, p := range pkgs {
		dir := strings.TrimSuffix(strings.TrimSuffix(p, "/..."), "/")
		if e := checkDir(dir); e != "" {
			return e
		}
		files, _ := filepath.Glob(filepath.Join(root, dir, "*_test.go"))
		for _, f := range files {
			src, _ := os.ReadFile(f)
			for _, m := range funcRE.FindAllStringSubmatch(string(src), -1) {
				names = append(names, m[1])
			}
		}
	}
	if strings.HasSuffix(strings.Join(pkgs, " "), "...") {
		return "" // the functions of many packages
	}
	for _, p := range patterns {
		if p == "^$" || p == "." {
			continue
		}
		top, _, _ := strings.Cut(p, "/") // go test matches subtests by the rest
		for _, alt := range strings.Split(top, "|") {
			re, err := regexp.Compile(alt)
			if err != nil {
				return "pattern " + p + ": " + err.Error()
			}
			found := false
			for _, n := range names {
				if re.MatchString(n) {
					found = true
					break
				}
			}
			if !found {
				return "no function of " + strings.Join(pkgs, " ") + " matches " + alt
			}
		}
	}
	return ""
}
