package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// makefile is the Makefile the runs below make stages of. Each target
// leaves a file named after it, so that a test can tell which ran.
// together waits for partner to have run (up to a minute, then it
// fails): it passes only when the two run at once, whichever starts
// first; partner waits for together's start likewise. afterone fails
// unless one has run. busy spins its shell for a while.
const makefile = `
one:
	@touch one.ran; echo one says hi; echo one to stderr >&2
two:
	@touch two.ran; echo two says hi
fails:
	@touch fails.ran; echo fails is failing; exit 3
slow:
	@sleep 0.2; touch slow.ran; echo slow ended
together:
	@touch together.started; i=0; until [ -f partner.ran ]; do i=$$((i+1)); [ $$i -lt 6000 ] || exit 1; sleep 0.01; done; touch together.ran; printf 'together saw partner\nand ends without a newline'
partner:
	@i=0; until [ -f together.started ]; do i=$$((i+1)); [ $$i -lt 6000 ] || exit 1; sleep 0.01; done; touch partner.ran; echo partner ran
afterone:
	@[ -f one.ran ] && touch afterone.ran
hangs:
	@touch hangs.started; exec sleep 60
busy:
	@i=0; while [ $$i -lt 300000 ]; do i=$$((i+1)); done; touch busy.ran
`

// syncBuffer is a bytes.Buffer safe for the writes of several
// processes' output copiers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newRunner returns a runner whose make works in a directory of its own
// holding makefile, that directory, and the buffer it writes to.
func newRunner(t *testing.T) (*runner, string, *syncBuffer) {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("these tests run the real make: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	return &runner{make: []string{mk, "-C", dir}, stdout: out, stderr: out, began: time.Now()}, dir, out
}

func ran(dir, target string) bool {
	_, err := os.Stat(filepath.Join(dir, target+".ran"))
	return err == nil
}

// TestRun: each case's steps, the targets that run and those that must
// not, and lines the output must hold (regular expressions, each
// matching a whole line).
func TestRun(t *testing.T) {
	cases := []struct {
		name    string
		steps   []string
		fails   bool
		ran     []string
		notRan  []string
		outputs []string
	}{
		{
			name:  "in order",
			steps: []string{"one", "two"},
			ran:   []string{"one", "two"},
			outputs: []string{
				`==> one`, `one says hi`, `one to stderr`, `<== one: ok, \d+\.\ds`,
				`==> two`, `two says hi`, `<== two: ok, \d+\.\ds`,
				`stage times .*`,
				`  stage +start +took +cpu +result`,
				`  one +0:00 +\d+\.\ds +\d+\.\ds +ok`,
				`  two +0:00 +\d+\.\ds +\d+\.\ds +ok`,
				`  total +\d+\.\ds +\d+\.\ds +ok`,
			},
		},
		{
			name:  "lanes at once, lines prefixed",
			steps: []string{"together & partner", "one"},
			ran:   []string{"together", "partner", "one"},
			outputs: []string{
				`==> together & partner`,
				`together \| together saw partner`,
				`together \| and ends without a newline`,
				`partner  \| partner ran`,
				`<== together: ok, \d+\.\ds`,
				`<== partner: ok, \d+\.\ds`,
				`one says hi`,
			},
		},
		{
			name:  "a lane in order, beside another",
			steps: []string{"one afterone & two"},
			ran:   []string{"one", "afterone", "two"},
			outputs: []string{
				`==> one afterone & two`,
				`one      \| one says hi`,
				`two      \| two says hi`,
				`<== afterone: ok, \d+\.\ds`,
			},
		},
		{
			name:   "a failure lets the stages beside it end, and starts no other",
			steps:  []string{"one", "fails & slow", "two"},
			fails:  true,
			ran:    []string{"one", "fails", "slow"},
			notRan: []string{"two"},
			outputs: []string{
				`fails \| fails is failing`,
				`fails \| make(\[\d+\])?: \*\*\* \[Makefile:\d+: fails\] Error 3`,
				`<== fails: FAILED after \d+\.\ds \(exit status 2\)`,
				`slow  \| slow ended`,
				`<== slow: ok, \d+\.\ds`,
				`  fails +0:00 +\d+\.\ds +\d+\.\ds +FAILED \(exit status 2\)`,
				`  slow +0:00 +\d+\.\ds +\d+\.\ds +ok`,
				`  two +not run`,
				`  total +\d+\.\ds +\d+\.\ds +FAILED at fails`,
			},
		},
		{
			name:    "a failure ends its lane",
			steps:   []string{"fails two & slow"},
			fails:   true,
			ran:     []string{"fails", "slow"},
			notRan:  []string{"two"},
			outputs: []string{`  two +not run`, `  total +\d+\.\ds +\d+\.\ds +FAILED at fails`},
		},
		{
			name:  "a target make does not know",
			steps: []string{"nonesuch", "one"},
			fails: true, notRan: []string{"one"},
			outputs: []string{`make(\[\d+\])?: \*\*\* No rule to make target 'nonesuch'.  Stop.`, `  total +\d+\.\ds +\d+\.\ds +FAILED at nonesuch`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, dir, out := newRunner(t)
			steps, err := parseSteps(c.steps)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.run(steps); (err != nil) != c.fails {
				t.Fatalf("run: %v; want failure %v\n%s", err, c.fails, out)
			}
			for _, target := range c.ran {
				if !ran(dir, target) {
					t.Errorf("%s did not run\n%s", target, out)
				}
			}
			for _, target := range c.notRan {
				if ran(dir, target) {
					t.Errorf("%s ran; want it not to\n%s", target, out)
				}
			}
			lines := strings.Split(out.String(), "\n")
			for _, want := range c.outputs {
				re := regexp.MustCompile("^" + want + "$")
				if !containsMatch(lines, re) {
					t.Errorf("no line of the output matches %q:\n%s", want, out)
				}
			}
		})
	}
}

func containsMatch(lines []string, re *regexp.Regexp) bool {
	for _, l := range lines {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}

// TestSince: with the time the run began, the table's first row is the
// time until stages started, and the other stages start after it.
func TestSince(t *testing.T) {
	r, _, out := newRunner(t)
	r.since = r.began.Add(-65 * time.Second)
	steps, _ := parseSteps([]string{"one"})
	if err := r.run(steps); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`  go run stages +0:00 +1m05s +ok`,
		`  one +1:0\d +\d+\.\ds +\d+\.\ds +ok`,
		`  total +1m0\ds +\d+\.\ds +ok`,
	} {
		if !containsMatch(strings.Split(out.String(), "\n"), regexp.MustCompile("^"+want+"$")) {
			t.Errorf("no line of the output matches %q:\n%s", want, out)
		}
	}
}

// TestCPU: a stage's processor time counts the processes make ran (the
// shell of busy's recipe spins), and the total adds every stage's.
func TestCPU(t *testing.T) {
	r, _, out := newRunner(t)
	steps, _ := parseSteps([]string{"busy & one"})
	if err := r.run(steps); err != nil {
		t.Fatal(err)
	}
	busy := regexp.MustCompile(`(?m)^  busy +0:00 +\d+\.\ds +(\d+\.\d)s +ok$`).FindStringSubmatch(out.String())
	total := regexp.MustCompile(`(?m)^  total +\d+\.\ds +(\d+\.\d)s +ok$`).FindStringSubmatch(out.String())
	if busy == nil || total == nil {
		t.Fatalf("no busy or total row with a processor time:\n%s", out)
	}
	b, _ := strconv.ParseFloat(busy[1], 64)
	tot, _ := strconv.ParseFloat(total[1], 64)
	if b == 0 {
		t.Errorf("busy's processor time is 0.0s: its recipe's shell is not counted\n%s", out)
	}
	if tot < b {
		t.Errorf("total processor time %ss is below busy's %ss\n%s", total[1], busy[1], out)
	}
}

// TestInterrupt: a signal reaches the make of the stage running, which
// stops it, and the run stops there, with the table.
func TestInterrupt(t *testing.T) {
	r, dir, out := newRunner(t)
	steps, _ := parseSteps([]string{"hangs", "one"})
	sig := make(chan os.Signal, 1)
	go r.forward(sig)
	done := make(chan error, 1)
	go func() { done <- r.run(steps) }()
	for {
		if _, err := os.Stat(filepath.Join(dir, "hangs.started")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	sig <- syscall.SIGTERM
	if err := <-done; err == nil || !strings.Contains(err.Error(), "hangs failed") {
		t.Errorf("run: %v; want hangs failed", err)
	}
	close(sig)
	if ran(dir, "one") {
		t.Errorf("the run went on after the signal:\n%s", out)
	}
	if !containsMatch(strings.Split(out.String(), "\n"), regexp.MustCompile(`^  one +not run$`)) {
		t.Errorf("the table does not show one not run:\n%s", out)
	}
}

func TestParseSteps(t *testing.T) {
	cases := []struct {
		args []string
		want string // the steps, each in brackets as the command line has it, or the error
	}{
		{[]string{"deps & modules  vulndb&staticcheck", "fmt", "vet"}, "[deps & modules vulndb & staticcheck] [fmt] [vet]"},
		{[]string{"one two"}, "[one two]"},
		{nil, "no steps given; want one or more make targets"},
		{[]string{"one", " "}, `step 2 (" ") has an empty lane; want make targets separated by spaces, lanes by &`},
		{[]string{"one & "}, `step 1 ("one & ") has an empty lane; want make targets separated by spaces, lanes by &`},
		{[]string{"one & two", "two"}, `stage "two" is named twice; a run makes each target once`},
		{[]string{"one", "SLUICE_CACHE=/tmp/x"}, `step 2: "SLUICE_CACHE=/tmp/x" is not a make target (make would read it as an option or a variable)`},
		{[]string{"-k one"}, `step 1: "-k" is not a make target (make would read it as an option or a variable)`},
	}
	for _, c := range cases {
		steps, err := parseSteps(c.args)
		var got string
		if err != nil {
			got = err.Error()
		} else {
			var parts []string
			for _, st := range steps {
				var lanes []string
				for _, ln := range st {
					var names []string
					for _, s := range ln {
						names = append(names, s.name)
					}
					lanes = append(lanes, strings.Join(names, " "))
				}
				parts = append(parts, "["+strings.Join(lanes, " & ")+"]")
			}
			got = strings.Join(parts, " ")
		}
		if got != c.want {
			t.Errorf("parseSteps(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

func TestDuration(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{0, "0.0s"},
		{1500 * time.Millisecond, "1.5s"},
		{59940 * time.Millisecond, "59.9s"},
		{59960 * time.Millisecond, "1m00s"},
		{61400 * time.Millisecond, "1m01s"},
		{3*time.Minute + 46*time.Second, "3m46s"},
		{75 * time.Minute, "75m00s"},
	}
	for _, c := range cases {
		if got := duration(c.d); got != c.want {
			t.Errorf("duration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0:00", 59999 * time.Millisecond: "0:59", 12*time.Minute + 7*time.Second: "12:07"} {
		if got := clock(d); got != want {
			t.Errorf("clock(%v) = %q, want %q", d, got, want)
		}
	}
}
