package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain makes the test binary a hog process when startHog starts it
// (os.Executable is the test binary here).
func TestMain(m *testing.M) {
	if os.Getenv(hogEnv) == "1" {
		spin()
	}
	os.Exit(m.Run())
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		env     string
		args    []string
		runs    int
		targets []target
		err     string
	}{
		{"", []string{"./a=^TestX", ".=Y|Z"}, 10, []target{{"./a", "^TestX"}, {".", "Y|Z"}}, ""},
		{"3", []string{"./a=."}, 3, []target{{"./a", "."}}, ""},
		{"3", []string{"-runs", "2", "./a=."}, 2, []target{{"./a", "."}}, ""},
		{"", []string{"./a=x=y"}, 10, []target{{"./a", "x=y"}}, ""},
		{"0", []string{"./a=."}, 0, nil, `STRESS_RUNS="0"`},
		{"many", []string{"./a=."}, 0, nil, `STRESS_RUNS="many"`},
		{"", nil, 0, nil, "no tests"},
		{"", []string{"./a"}, 0, nil, `argument "./a": want PKG=REGEXP`},
		{"", []string{"./a="}, 0, nil, "want PKG=REGEXP"},
		{"", []string{"-runs", "0", "./a=."}, 0, nil, "-runs must be at least 1"},
		{"", []string{"-hogs", "-1", "./a=."}, 0, nil, "-hogs must not be negative"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(append([]string{tt.env}, tt.args...), " "), func(t *testing.T) {
			t.Setenv("STRESS_RUNS", tt.env)
			s, err := parseFlags(tt.args)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil || s.runs != tt.runs || !slices.Equal(s.targets, tt.targets) {
				t.Fatalf("got %d runs of %v, %v; want %d of %v", s.runs, s.targets, err, tt.runs, tt.targets)
			}
		})
	}
}

// module writes a module with one package, p, of the files given, in a
// temporary directory, and makes it the working directory.
func module(t *testing.T, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.22\n"
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
}

// TestGoTest: a real go test run of a package whose tests pass, fail,
// skip and fail in a subtest is counted as go test reported it, and each
// failing test that has no failing subtest is listed with its output.
func TestGoTest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test -race; skipped under -short")
	}
	module(t, map[string]string{"p/p_test.go": `package p

import "testing"

func TestPass(t *testing.T) {}

func TestFail(t *testing.T) { t.Log("before"); t.Error("boom") }

func TestSkip(t *testing.T) { t.Skip("not here") }

func TestSub(t *testing.T) {
	t.Run("good", func(t *testing.T) {})
	t.Run("bad", func(t *testing.T) { t.Fatal("sub boom") })
}

func TestOther(t *testing.T) { t.Error("not run") }
`})
	log := filepath.Join(t.TempDir(), "log.json")
	p, err := goTest(context.Background(), target{pkg: "./p", run: "^Test(Pass|Fail|Skip|Sub)"}, time.Minute, log)
	if err != nil {
		t.Fatal(err)
	}
	// TestPass, TestSub/good; TestFail, TestSub/bad, TestSub; TestSkip.
	if p.passed != 2 || p.failed != 3 || p.skipped != 1 || p.top != 4 {
		t.Errorf("%d passed, %d failed, %d skipped, %d top-level; want 2, 3, 1, 4", p.passed, p.failed, p.skipped, p.top)
	}
	var names []string
	for _, f := range p.failures {
		names = append(names, f.test)
		out := strings.Join(f.output, "\n")
		if want := map[string]string{"TestFail": "boom", "TestSub/bad": "sub boom"}[f.test]; !strings.Contains(out, want) || strings.Contains(out, "=== RUN") {
			t.Errorf("%s's output %q, want it to say %q, without the === lines", f.test, out, want)
		}
	}
	if !slices.Equal(names, []string{"TestFail", "TestSub/bad"}) {
		t.Errorf("failures %v, want TestFail and TestSub/bad (not TestSub, whose subtest failed)", names)
	}
	if b, err := os.ReadFile(log); err != nil || !bytes.Contains(b, []byte(`"Action":"fail"`)) {
		t.Errorf("the log %s holds no go test -json output: %v", log, err)
	}
	if _, ok := p.elapsed["TestPass"]; !ok {
		t.Errorf("no time for TestPass: %v", p.elapsed)
	}
}

// TestGoTestPackageFailure: a package that does not build is a failure
// of the package, with the compiler's message.
func TestGoTestPackageFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test -race; skipped under -short")
	}
	module(t, map[string]string{"p/p_test.go": "package p\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { undefinedThing() }\n"})
	p, err := goTest(context.Background(), target{pkg: "./p", run: "."}, time.Minute, filepath.Join(t.TempDir(), "log.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.failures) != 1 || p.failures[0].test != "(package)" || !strings.Contains(strings.Join(p.failures[0].output, "\n"), "undefinedThing") {
		t.Errorf("failures %+v, want the package's, naming undefinedThing", p.failures)
	}
}

// TestHog: the hog's processes use CPU until stopped, are gone after, and
// one that ends early is told.
func TestHog(t *testing.T) {
	h, err := startHog(2)
	if err != nil {
		t.Fatal(err)
	}
	defer h.stop()
	if dead := h.exited(); dead != "" {
		t.Fatalf("at start: %s", dead)
	}
	pids := []int{h.procs[0].cmd.Process.Pid, h.procs[1].cmd.Process.Pid}
	// Until the kernel has counted some CPU time for each (a tick).
	for _, pid := range pids {
		for deadline := time.Now().Add(30 * time.Second); cpuTicks(t, pid) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("hog process %d used no CPU in 30s", pid)
			}
		}
	}
	// A process that ends is reported (the control: exited can tell).
	_ = h.procs[1].cmd.Process.Kill()
	<-h.procs[1].done
	if dead := h.exited(); !strings.Contains(dead, "exited") {
		t.Errorf("after one hog process was killed: exited() = %q, want it named", dead)
	}
	load := h.stop()
	if load.procs != 2 || load.cpu <= 0 || load.wall <= 0 {
		t.Errorf("load %+v: want 2 processes, some CPU time", load)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
			t.Errorf("hog process %d after stop: kill 0 = %v, want ESRCH (gone)", pid, err)
		}
	}
	if again := h.stop(); again != load {
		t.Errorf("a second stop returned %+v, want the first's %+v", again, load)
	}
}

// cpuTicks returns the user and system clock ticks of process pid
// (/proc/<pid>/stat fields 14 and 15).
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	user, err1 := strconv.Atoi(f[11])
	sys, err2 := strconv.Atoi(f[12])
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return user + sys
}

// TestSummary: the summary counts the runs that failed, and each failing
// test's runs, and names a package whose regexp ran nothing.
func TestSummary(t *testing.T) {
	targets := []target{{"./a", "."}, {"./b", "^TestNone"}}
	pkg := func(name string, top int, fails ...string) pkgResult {
		p := pkgResult{pkg: name, top: top, passed: top, dur: time.Second, elapsed: map[string]time.Duration{"TestSlow": 3 * time.Second}}
		for _, f := range fails {
			p.failures = append(p.failures, failure{test: f, output: []string{"x_test.go:1: " + f + " broke"}})
			p.failed++
		}
		return p
	}
	s := newSummary(targets)
	s.add(runResult{n: 1, dur: 2 * time.Second, pkgs: []pkgResult{pkg("./a", 3), pkg("./b", 0)}})
	s.add(runResult{n: 2, dur: 2 * time.Second, pkgs: []pkgResult{pkg("./a", 3, "TestX/sub"), pkg("./b", 0)}})
	s.add(runResult{n: 3, dur: 2 * time.Second, pkgs: []pkgResult{pkg("./a", 3, "TestX/sub", "TestY"), pkg("./b", 0)}})
	if s.failedRuns != 2 || !slices.Equal(s.fails["./a TestX/sub"], []int{2, 3}) || !slices.Equal(s.fails["./a TestY"], []int{3}) {
		t.Errorf("%d failed runs, fails %v; want 2, TestX/sub in runs 2 and 3, TestY in 3", s.failedRuns, s.fails)
	}
	if got := s.empty(); got != "./b=^TestNone" {
		t.Errorf("empty() = %q, want ./b's regexp, which ran no test", got)
	}
	var out bytes.Buffer
	printRun(&out, 3, s.runs[2])
	s.print(&out, 6*time.Second, hogLoad{procs: 2, wall: 6 * time.Second, cpu: 9 * time.Second})
	for _, want := range []string{
		"run  3/3  FAIL", "--- FAIL ./a TestY", "x_test.go:1: TestY broke",
		"3 runs in 6s, 1 passed, 2 failed", "1.50 CPUs on average (75% of a core each)",
		"| 2 | **FAIL** | 2s | 1s | 1s |", "| ./a TestX/sub | 2 of 3 | 2, 3 |", "./a TestSlow",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}
