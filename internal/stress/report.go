package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// maxOutput is how many lines of a failing test's output a report shows;
// the run's log holds them all.
const maxOutput = 40

// printRun prints one run's line and, when it failed, each failing test
// with its output.
func printRun(w io.Writer, runs int, r runResult) {
	result := "PASS"
	if r.failed() {
		result = "FAIL"
	}
	var parts []string
	for _, p := range r.pkgs {
		part := fmt.Sprintf("%s %v: %d passed", p.pkg, p.dur.Round(time.Second), p.passed)
		if p.failed > 0 {
			part += fmt.Sprintf(", %d failed", p.failed)
		}
		if p.skipped > 0 {
			part += fmt.Sprintf(", %d skipped", p.skipped)
		}
		parts = append(parts, part)
	}
	fmt.Fprintf(w, "run %2d/%d  %s  %8v  (%s)\n", r.n, runs, result, r.dur.Round(time.Second), strings.Join(parts, "; "))
	for _, p := range r.pkgs {
		for _, f := range p.failures {
			fmt.Fprintf(w, "    --- FAIL %s %s\n", p.pkg, f.test)
			lines := f.output
			if len(lines) > maxOutput {
				lines = lines[len(lines)-maxOutput:]
				fmt.Fprintf(w, "        (the last %d of %d lines)\n", maxOutput, len(f.output))
			}
			for _, l := range lines {
				fmt.Fprintf(w, "        %s\n", l)
			}
		}
		if len(p.failures) > 0 {
			fmt.Fprintf(w, "    (whole output: %s)\n", p.log)
		}
	}
}

// summary gathers the runs.
type summary struct {
	targets    []target
	runs       []runResult
	failedRuns int
	fails      map[string][]int // "pkg test" -> the runs it failed in
}

func newSummary(targets []target) *summary {
	return &summary{targets: targets, fails: map[string][]int{}}
}

func (s *summary) add(r runResult) {
	s.runs = append(s.runs, r)
	if r.failed() {
		s.failedRuns++
	}
	for _, p := range r.pkgs {
		for _, f := range p.failures {
			k := p.pkg + " " + f.test
			s.fails[k] = append(s.fails[k], r.n)
		}
	}
}

// empty names a package whose regexp ran no test in any run.
func (s *summary) empty() string {
	for i, t := range s.targets {
		ran := false
		for _, r := range s.runs {
			ran = ran || r.pkgs[i].top > 0
		}
		if !ran {
			return t.pkg + "=" + t.run
		}
	}
	return ""
}

// print writes the summary: the runs, the failures by test, the time by
// package and the slowest tests.
func (s *summary) print(w io.Writer, wall time.Duration, load hogLoad) {
	n := len(s.runs)
	fmt.Fprintf(w, "\nsummary: %d runs in %v, %d passed, %d failed; %s\n\n", n, wall.Round(time.Second), n-s.failedRuns, s.failedRuns, load)
	s.printRuns(w)
	fmt.Fprintln(w)
	if len(s.fails) == 0 {
		fmt.Fprintf(w, "no test failed in any of the %d runs\n", n)
	} else {
		fmt.Fprintln(w, "| test | failed | in runs |")
		fmt.Fprintln(w, "|---|---|---|")
		keys := make([]string, 0, len(s.fails))
		for k := range s.fails {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "| %s | %d of %d | %s |\n", k, len(s.fails[k]), n, joinInts(s.fails[k]))
		}
	}
	fmt.Fprintln(w)
	s.printSlowest(w, 10)
}

// printRuns writes one table row per run: result, time, each package's
// time.
func (s *summary) printRuns(w io.Writer) {
	head, rule := "| run | result | time |", "|---|---|---|"
	for _, t := range s.targets {
		head += " " + t.pkg + " |"
		rule += "---|"
	}
	fmt.Fprintln(w, head+" tests (passed/failed/skipped) |")
	fmt.Fprintln(w, rule+"---|")
	for _, r := range s.runs {
		result := "pass"
		if r.failed() {
			result = "**FAIL**"
		}
		row := fmt.Sprintf("| %d | %s | %v |", r.n, result, r.dur.Round(time.Second))
		var passed, failed, skipped int
		for _, p := range r.pkgs {
			row += fmt.Sprintf(" %v |", p.dur.Round(time.Second))
			passed, failed, skipped = passed+p.passed, failed+p.failed, skipped+p.skipped
		}
		fmt.Fprintf(w, "%s %d/%d/%d |\n", row, passed, failed, skipped)
	}
}

// printSlowest writes the k top-level tests that took longest in a run,
// with their shortest and longest time over the runs.
func (s *summary) printSlowest(w io.Writer, k int) {
	type span struct {
		name     string
		min, max time.Duration
	}
	spans := map[string]*span{}
	for _, r := range s.runs {
		for _, p := range r.pkgs {
			for test, d := range p.elapsed {
				if strings.Contains(test, "/") {
					continue
				}
				name := p.pkg + " " + test
				sp := spans[name]
				if sp == nil {
					sp = &span{name: name, min: d, max: d}
					spans[name] = sp
				}
				sp.min, sp.max = min(sp.min, d), max(sp.max, d)
			}
		}
	}
	all := make([]*span, 0, len(spans))
	for _, sp := range spans {
		all = append(all, sp)
	}
	slices.SortFunc(all, func(a, b *span) int { return int(b.max - a.max) })
	fmt.Fprintf(w, "slowest tests (shortest and longest of the %d runs):\n", len(s.runs))
	for _, sp := range all[:min(k, len(all))] {
		fmt.Fprintf(w, "  %-60s %8v %8v\n", sp.name, sp.min.Round(100*time.Millisecond), sp.max.Round(100*time.Millisecond))
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
