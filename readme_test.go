package sluice_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeExamples keeps the README's Go examples in step with the
// runnable Example functions they show: every statement of an example's
// body (less its fixed clock, its quiet logger, and the lines up to the
// last one marked "(setup)", which write the file the README shows) must
// appear in the README block, in order.
func TestReadmeExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	tests := []struct {
		file  string
		block int // index of the README's Go block
	}{
		{"example_test.go", 0},
		{"policyfile/example_test.go", 3},
	}
	for _, tt := range tests {
		src, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		body := regexp.MustCompile(`(?s)\nfunc Example\(\) \{\n(.*?)\n\t// Output:`).FindSubmatch(src)
		if len(blocks) <= tt.block || body == nil {
			t.Fatalf("README has no Go block %d, or %s no Example with output", tt.block, tt.file)
		}
		doc := string(blocks[tt.block][1])
		code, _, _ := strings.Cut(string(body[1]), "// Try it:") // what follows only prints the outcome
		if i := strings.LastIndex(code, "// (setup)\n"); i >= 0 {
			code = code[i:] // what precedes writes the file the README shows
		}
		for _, line := range strings.Split(code, "\n") {
			line = strings.TrimSpace(line)
			line = strings.ReplaceAll(line, ", sluice.WithClock(fixed)", "")
			line = strings.ReplaceAll(line, ", httplimit.WithClock(fixed)", "")
			line = strings.ReplaceAll(line, "Open(path, policyfile.WithLogger(quiet))", `Open("sluice.yaml")`)
			if line == "" || line == "// (setup)" {
				continue
			}
			i := strings.Index(doc, line)
			if i < 0 {
				t.Errorf("README block %d lacks (or has out of order) the line %q of %s", tt.block, line, tt.file)
				continue
			}
			doc = doc[i+len(line):]
		}
	}
}
