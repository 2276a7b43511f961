//go:build e2e

package docs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
)

// root is the repository, seen from this package's directory.
const root = ".."

// module is the repository's module path.
const module = "github.com/sluice-go/sluice"

// block is one fenced code block of a guide.
type block struct {
	file string // relative to root
	line int    // of the opening fence
	lang string // the fence's info string
	body string
	note string // the HTML comment on the line before the fence, without <!-- -->
}

func (b block) String() string { return fmt.Sprintf("%s:%d (%s)", b.file, b.line, b.lang) }

// guideFiles lists the Markdown files held to their blocks and links:
// the README, every guide of docs/, and the guides that live beside what
// they describe.
func guideFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "RELIABILITY.md", "BENCHMARKS.md", "CHANGELOG.md", "deploy/README.md", "clients/node/README.md"}
	guides, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range guides {
		files = append(files, "docs/"+g)
	}
	return files
}

func read(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var noteRE = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)

// blocks returns the fenced blocks of the guides.
func blocks(t *testing.T) []block {
	t.Helper()
	var all []block
	for _, f := range guideFiles(t) {
		if f == "BENCHMARKS.md" {
			continue // bench/cmd/report writes it, and bench's tests check its sections
		}
		lines := strings.Split(read(t, f), "\n")
		for i := 0; i < len(lines); i++ {
			fence, ok := strings.CutPrefix(lines[i], "```")
			if !ok {
				continue
			}
			b := block{file: f, line: i + 1, lang: strings.TrimSpace(fence)}
			if i > 0 {
				if m := noteRE.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
					b.note = m[1]
				}
			}
			var body []string
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				body = append(body, lines[i])
			}
			if i == len(lines) {
				t.Fatalf("%s:%d: a block that never ends", f, b.line)
			}
			b.body = strings.Join(body, "\n") + "\n"
			all = append(all, b)
		}
	}
	return all
}

// TestFrontDoor: the README stays a front door, at most 250 lines, that
// links every guide.
func TestFrontDoor(t *testing.T) {
	readme := read(t, "README.md")
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines, more than the 250 of a front door: move the detail into a guide", n)
	}
	for _, f := range guideFiles(t) {
		if f == "README.md" || f == "CHANGELOG.md" {
			continue
		}
		if !strings.Contains(readme, "]("+f+")") {
			t.Errorf("README.md does not link the guide %s", f)
		}
	}
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinks: every relative link of a guide names a file of the
// repository, and every #fragment a heading of its target.
func TestLinks(t *testing.T) {
	for _, f := range guideFiles(t) {
		text := stripCode(read(t, f))
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
			}
			if _, err := os.Stat(filepath.Join(root, file)); err != nil {
				t.Errorf("%s: link %q: %s does not exist", f, target, file)
				continue
			}
			if frag != "" && strings.HasSuffix(file, ".md") && !slices.Contains(anchors(t, file), frag) {
				t.Errorf("%s: link %q: %s has no heading #%s", f, target, file, frag)
			}
		}
	}
}

// stripCode removes fenced blocks and code spans, whose brackets are not
// links.
func stripCode(s string) string {
	s = regexp.MustCompile("(?s)\n```.*?\n```").ReplaceAllString(s, "\n")
	return regexp.MustCompile("`[^`\n]*`").ReplaceAllString(s, "")
}

var anchorCache sync.Map

// anchors returns the fragments GitHub gives the headings of a Markdown
// file: lower case, punctuation but '-' and '_' dropped, spaces as '-',
// and -1, -2 after a repeated one.
func anchors(t *testing.T, file string) []string {
	if a, ok := anchorCache.Load(file); ok {
		return a.([]string)
	}
	var out []string
	seen := map[string]int{}
	for _, line := range strings.Split(stripCode("\n"+read(t, file)), "\n") {
		h, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		h = strings.TrimLeft(h, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r == ' ':
				slug.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		s := slug.String()
		if n := seen[s]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", s, n))
		} else {
			out = append(out, s)
		}
		seen[s]++
	}
	anchorCache.Store(file, out)
	return out
}

// TestBlocksAreChecked: every block with a language is one a test here
// checks, so that none is added unchecked.
func TestBlocksAreChecked(t *testing.T) {
	for _, b := range blocks(t) {
		switch b.lang {
		case "", "go", "yaml", "sh", "json", "js":
		default:
			t.Errorf("%s: no test checks a block of %q: check it here, or show it as output (no language)", b, b.lang)
		}
	}
}

// tmp is this run's scratch directory: the sluice binary and the files
// the tests write. TestMain removes it.
var tmp string

// built is cmd/sluice, built once for the tests that run it.
var built struct {
	once sync.Once
	bin  string
	err  error
}

func binary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.bin = filepath.Join(tmp, "sluice")
		if out, err := exec.Command("go", "build", "-o", built.bin, module+"/cmd/sluice").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	var err error
	if tmp, err = os.MkdirTemp("", "sluice-docs"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}
