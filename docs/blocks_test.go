//go:build e2e

package docs_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestGoBlocks: a Go block is a whole program, which must build, or
// shows a runnable Example (<!-- example: FILE -->, its whole body, or
// <!-- excerpt: FILE -->, some of its lines), which must say what the
// Example does, in order. The Example is the file's func Example, or the
// one named after the file (<!-- excerpt: FILE ExampleLimiter_Reserve -->).
func TestGoBlocks(t *testing.T) {
	overlay := map[string]string{}
	var pkgs []string
	for _, b := range blocks(t) {
		if b.lang != "go" {
			continue
		}
		kind, file, _ := strings.Cut(b.note, ":")
		file = strings.TrimSpace(file)
		switch {
		case kind == "example" || kind == "excerpt":
			file, name, _ := strings.Cut(file, " ")
			checkExample(t, b, file, cmp.Or(strings.TrimSpace(name), "Example"), kind == "excerpt")
		case strings.HasPrefix(b.body, "package main\n"):
			// Built as a package of its own that exists only in go
			// build's overlay: nothing is written into the repository.
			dir := fmt.Sprintf("docs/internal/block%d", len(pkgs))
			src := filepath.Join(tmp, fmt.Sprintf("block%d.go", len(pkgs)))
			if err := os.WriteFile(src, []byte(b.body), 0o600); err != nil {
				t.Fatal(err)
			}
			abs, err := filepath.Abs(filepath.Join(root, dir, "main.go"))
			if err != nil {
				t.Fatal(err)
			}
			overlay[abs] = src
			pkgs = append(pkgs, "./"+dir)
			t.Logf("%s builds as %s", b, dir)
		default:
			t.Errorf("%s: a Go block that is neither a program (package main) nor marked as an Example's (<!-- example: file -->)", b)
		}
	}
	if len(pkgs) == 0 {
		return
	}
	o, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ofile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ofile, o, 0o600); err != nil {
		t.Fatal(err)
	}
	bins := filepath.Join(tmp, "bin") + string(filepath.Separator) // -o into a directory: one binary per program
	cmd := exec.Command("go", append([]string{"build", "-o", bins, "-overlay", ofile}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the guides' Go programs do not build: %v\n%s", err, out)
	}
}

// exampleRE matches the func named name and its body.
func exampleRE(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?s)\nfunc ` + regexp.QuoteMeta(name) + `\(\) \{\n(.*?)\n\}\n`)
}

// checkExample holds a Go block to the Example of file: every statement
// of the Example's body (less its fixed clock and quiet logger, the lines
// up to the last one marked "(setup)", which write the file the guide
// shows, and what follows "// Try it:", which prints the outcome) is in
// the block in order; for an excerpt, every line of the block is in the
// Example in order.
func checkExample(t *testing.T, b block, file, name string, excerpt bool) {
	t.Helper()
	m := exampleRE(name).FindStringSubmatch(read(t, file))
	if m == nil {
		t.Errorf("%s: %s has no func %s", b, file, name)
		return
	}
	code, _, _ := strings.Cut(m[1], "// Output:")
	code, _, _ = strings.Cut(code, "// Try it:")
	if i := strings.LastIndex(code, "// (setup)\n"); i >= 0 {
		code = code[i+len("// (setup)\n"):]
	}
	code = strings.NewReplacer(
		", sluice.WithClock(fixed)", "",
		", httplimit.WithClock(fixed)", "",
		", sluice.WithClock(clock)", "",
		"Open(path, policyfile.WithLogger(quiet))", `Open("sluice.yaml")`,
	).Replace(code)
	want, in := lines(code), b.body
	if excerpt {
		// A line's comment may differ: the guide says where the
		// package comes from, the Example what production uses.
		want, in = nil, code
		for _, l := range lines(b.body) {
			l, _, _ = strings.Cut(l, " //")
			want = append(want, l)
		}
	}
	for _, line := range want {
		i := strings.Index(in, line)
		if i < 0 {
			t.Errorf("%s: the line %q is not in %s's Example (or is out of its order)", b, line, file)
			continue
		}
		in = in[i+len(line):]
	}
}

// lines returns the non-empty lines of s, trimmed.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestYAMLBlocks: a YAML block is a file of the repository as it is
// (<!-- file: -->), a list of Envoy route rate limits (<!-- envoy:
// rate_limits -->, decoded into go-control-plane's types and validated by
// their rules), or a policy file (sluice's or envoyproxy/ratelimit's) that
// sluice check accepts.
func TestYAMLBlocks(t *testing.T) {
	bin := binary(t)
	for i, b := range blocks(t) {
		if b.lang != "yaml" {
			continue
		}
		kind, arg, _ := strings.Cut(b.note, ":")
		arg = strings.TrimSpace(arg)
		switch kind {
		case "file": // TestFileBlocks
		case "envoy":
			checkRateLimits(t, b)
		case "godoc":
			pkg, heading, _ := strings.Cut(arg, " ")
			if want := docBlock(t, pkg, heading); b.body != want {
				t.Errorf("%s: the block is not the one under # %s in %s's package doc: show it again\n%s", b, heading, pkg, want)
			}
			fallthrough
		case "":
			path := filepath.Join(tmp, fmt.Sprintf("policy%d.yaml", i))
			if err := os.WriteFile(path, []byte(b.body), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, "check", "--config", path).CombinedOutput(); err != nil {
				t.Errorf("%s: sluice check refuses the policy file: %v\n%s", b, err, out)
			}
		default:
			t.Errorf("%s: unknown note %q", b, b.note)
		}
	}
}

// docBlock returns the code block under the heading "# heading" of the
// package doc in dir/doc.go.
func docBlock(t *testing.T, dir, heading string) string {
	t.Helper()
	src := read(t, dir+"/doc.go")
	_, after, ok := strings.Cut(src, "\n// # "+heading+"\n//\n")
	if !ok {
		t.Fatalf("%s/doc.go has no heading # %s", dir, heading)
	}
	var out strings.Builder
	for _, line := range strings.Split(after, "\n") {
		code, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			break
		}
		out.WriteString(code + "\n")
	}
	return out.String()
}

// checkRateLimits decodes a block of Envoy route rate_limits entries.
func checkRateLimits(t *testing.T, b block) {
	t.Helper()
	var doc struct {
		RateLimits []any `yaml:"rate_limits"`
	}
	if err := yaml.Unmarshal([]byte(b.body), &doc); err != nil || len(doc.RateLimits) == 0 {
		t.Errorf("%s: not a list of rate_limits: %v", b, err)
		return
	}
	for i, rl := range doc.RateLimits {
		j, err := json.Marshal(rl)
		if err != nil {
			t.Fatal(err)
		}
		var msg routev3.RateLimit
		if err := protojson.Unmarshal(j, &msg); err != nil {
			t.Errorf("%s: rate_limits[%d] is not an Envoy RateLimit: %v", b, i, err)
			continue
		}
		if err := msg.ValidateAll(); err != nil {
			t.Errorf("%s: rate_limits[%d]: %v", b, i, err)
		}
	}
}

// TestFileBlocks: a block marked <!-- file: path --> is that file of the
// repository as it is, whatever its language.
func TestFileBlocks(t *testing.T) {
	for _, b := range blocks(t) {
		if path, ok := strings.CutPrefix(b.note, "file:"); ok {
			path = strings.TrimSpace(path)
			if want := read(t, path); b.body != want {
				t.Errorf("%s: the block is not %s as it is: show the file again", b, path)
			}
		}
	}
}

// TestJSONBlocks: a JSON block is valid JSON.
func TestJSONBlocks(t *testing.T) {
	for _, b := range blocks(t) {
		if b.lang == "json" && !json.Valid([]byte(b.body)) {
			t.Errorf("%s: not valid JSON", b)
		}
	}
}

// TestJSBlocks: a JavaScript block is valid JavaScript to node --check,
// as the body of an async function (a guide shows statements, with await,
// out of their module).
func TestJSBlocks(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed (make deps installs nodejs): %v", err)
	}
	for i, b := range blocks(t) {
		if b.lang != "js" {
			continue
		}
		path := filepath.Join(tmp, fmt.Sprintf("block%d.js", i))
		if err := os.WriteFile(path, []byte("(async () => {\n"+b.body+"\n});\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(node, "--check", path).CombinedOutput(); err != nil {
			t.Errorf("%s: node --check: %v\n%s", b, err, out)
		}
	}
}
