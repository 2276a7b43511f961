package sluice_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeExample keeps the README's library example in step with the
// package's Example: every statement of the example's body must appear in
// the README's first Go block, in order.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```go\n(.*?)```").FindSubmatch(readme)
	body := regexp.MustCompile(`(?s)\nfunc Example\(\) \{\n(.*?)\n\t// Output:`).FindSubmatch(src)
	if block == nil || body == nil {
		t.Fatal("README has no Go block, or example_test.go no Example with output")
	}
	doc := string(block[1])
	for _, line := range strings.Split(string(body[1]), "\n") {
		line = strings.TrimSpace(line)
		line = strings.ReplaceAll(line, ", sluice.WithClock(fixed)", "") // the example's fixed clock
		if line == "" {
			continue
		}
		i := strings.Index(doc, line)
		if i < 0 {
			t.Errorf("README example lacks (or has out of order) the line %q of func Example", line)
			continue
		}
		doc = doc[i+len(line):]
	}
}
