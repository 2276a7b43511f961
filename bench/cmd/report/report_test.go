package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/bench/internal/section"
)

func write(t *testing.T, path string, s section.Section) {
	t.Helper()
	if err := s.Write(path); err != nil {
		t.Fatal(err)
	}
}

// TestGenerate writes two sections (in the reverse of their file names'
// order), a benchstat file and a go.mod, and checks the report: goals up
// front, a missing expected section reported as not measured, sections
// in file-name order, charts written and linked relative to the report,
// cells escaped.
func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "bench", "results")
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(results, "library.json"), section.Section{
		Title: "Library side", Command: "go run ./cmd/libbench",
		Notes:  []string{"a note"},
		Tables: []section.Table{{Caption: "cap", Header: []string{"impl", "rate"}, Rows: [][]string{{"sluice | gcra", "10k/s"}}}},
		Charts: []section.Chart{{Name: "rate", Title: "Rate", Unit: "decisions/s", Bars: []section.Bar{{Label: "sluice gcra", Value: 2000}, {Label: "redis_rate <v10>", Value: 1000}}}},
		Goals: []section.Goal{
			{Goal: "fast", Target: "2×", Measured: "2.1×", Met: true},
			{Goal: "small", Target: "56 B", Measured: "88 B", Limit: "the key name"},
		},
	})
	write(t, filepath.Join(results, "aardvark.json"), section.Section{Title: "First by name", Command: "true"})
	// A stale chart from an earlier run is removed.
	charts := filepath.Join(results, "charts")
	if err := os.MkdirAll(charts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(charts, "old.svg"), []byte("<svg/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	benchstat := filepath.Join(results, "micro-benchstat.txt")
	if err := os.WriteFile(benchstat, []byte("Memory/x  100n ± 1%\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gomod := filepath.Join(dir, "bench", "go.mod")
	if err := os.WriteFile(gomod, []byte("module m\n\nrequire github.com/a/b v1.2.3\n\nrequire (\n\tgithub.com/c/d v0.1.0\n\tgithub.com/sluice-go/sluice v0.0.0\n\tgithub.com/e/f v1.0.0 // indirect\n)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "BENCHMARKS.md")
	c := config{results: results, out: out, charts: charts, benchstat: benchstat, gomod: gomod,
		expect: []string{"library", "service"}, now: time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC),
		machine: func() []string { return []string{"CPU: test"} }}
	if err := generate(c); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"| fast | 2× | 2.1× | yes | – | [library](#library-side) |",
		"| small | 56 B | 88 B | **no** | the key name | [library](#library-side) |",
		"not measured: `bench/results/service.json` is missing",
		"- CPU: test",
		"| github.com/a/b | v1.2.3 |",
		"| github.com/c/d | v0.1.0 |",
		"go run ./cmd/libbench",
		"![Rate](bench/results/charts/library-rate.svg)",
		"| sluice \\| gcra | 10k/s |",
		"Memory/x  100n ± 1%",
		"2026-12-01 17:00 UTC",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	for _, not := range []string{"github.com/e/f", "sluice-go/sluice | v0.0.0", "every goal of the library section"} {
		if strings.Contains(md, not) {
			t.Errorf("report has %q", not)
		}
	}
	if strings.Index(md, "## Goals") > strings.Index(md, "## First by name") ||
		strings.Index(md, "## First by name") > strings.Index(md, "## Library side") {
		t.Error("want the goals first, then the sections in the order of their file names")
	}
	if _, err := os.Stat(filepath.Join(charts, "old.svg")); !os.IsNotExist(err) {
		t.Errorf("stale chart kept: %v", err)
	}
	svg, err := os.ReadFile(filepath.Join(charts, "library-rate.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "redis_rate &lt;v10&gt;") || strings.Contains(string(svg), "<v10>") {
		t.Errorf("label not escaped in %s", svg)
	}
}

// TestGenerateNoSections: with no results at all, the report still says
// what was not measured, and no benchstat file is no error.
func TestGenerateNoSections(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "B.md")
	c := config{results: filepath.Join(dir, "none"), out: out, charts: filepath.Join(dir, "charts"), benchstat: filepath.Join(dir, "missing.txt"),
		gomod: filepath.Join(dir, "missing.mod"), expect: []string{"library"}, machine: func() []string { return nil }}
	if err := generate(c); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), "`bench/results/library.json` is missing") || !strings.Contains(string(b), "could not be read") {
		t.Errorf("report:\n%s", b)
	}
}

// TestGenerateBadSection: a section file that does not parse is an error
// naming it, not a silent gap.
func TestGenerateBadSection(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte(`{"title":"t","command":"c","goal":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := config{results: dir, out: filepath.Join(dir, "B.md"), charts: filepath.Join(dir, "charts"), machine: func() []string { return nil }}
	if err := generate(c); err == nil || !strings.Contains(err.Error(), "x.json") {
		t.Fatalf("error %v, want one naming x.json", err)
	}
}

func TestSVGChart(t *testing.T) {
	svg := svgChart(section.Chart{Name: "c", Title: "A & B", Unit: "µs", Bars: []section.Bar{{Label: "sluice", Value: 50}, {Label: "peer", Value: 100}, {Label: "zero", Value: 0}}})
	widths := regexp.MustCompile(`<rect x="\d+" y="\d+" width="([0-9.]+)"`).FindAllStringSubmatch(svg, -1)
	if len(widths) != 3 {
		t.Fatalf("%d bars, want 3:\n%s", len(widths), svg)
	}
	if widths[0][1] == "0.0" || widths[2][1] != "0.0" {
		t.Errorf("bar widths %v: want the zero bar empty and the others drawn", widths)
	}
	half, _ := strconv.ParseFloat(widths[0][1], 64)
	full, _ := strconv.ParseFloat(widths[1][1], 64)
	if full == 0 || half/full < 0.49 || half/full > 0.51 {
		t.Errorf("bars of 50 and 100 are %v and %v wide: want half", half, full)
	}
	for _, want := range []string{"A &amp; B", sluiceColour, peerColour, "100 µs", ">50 µs<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q:\n%s", want, svg)
		}
	}
}

func TestValueText(t *testing.T) {
	tests := []struct {
		v    float64
		unit string
		want string
	}{
		{2_240_000, "decisions/s", "2.24M decisions/s"},
		{151_200, "", "151.2k"},
		{480, "B", "480 B"},
		{15.04, "µs", "15 µs"},
		{8.79, "µs", "8.79 µs"},
		{0, "ns/op", "0 ns/op"},
	}
	for _, tt := range tests {
		if got := valueText(tt.v, tt.unit); got != tt.want {
			t.Errorf("valueText(%v, %q) = %q, want %q", tt.v, tt.unit, got, tt.want)
		}
	}
}

func TestCellAnchor(t *testing.T) {
	if got := cell("a|b\nc"); got != `a\|b c` {
		t.Errorf("cell = %q", got)
	}
	if got := cell("  "); got != "–" {
		t.Errorf("cell of blanks = %q", got)
	}
	if got := anchor("Library: sluice beside the Go rate limiters"); got != "library-sluice-beside-the-go-rate-limiters" {
		t.Errorf("anchor = %q", got)
	}
}

// TestRelPath: make bench runs the report in bench/ with -out
// ../BENCHMARKS.md, and the charts must be linked from the root.
func TestRelPath(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "bench")
	if err := os.MkdirAll(bench, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(bench)
	got, err := relPath("..", "results/charts/x.svg")
	if err != nil || filepath.ToSlash(got) != "bench/results/charts/x.svg" {
		t.Errorf("relPath = %q, %v; want bench/results/charts/x.svg", got, err)
	}
}
