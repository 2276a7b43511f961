package linear

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sluice-go/sluice"
)

// CheckTimeout bounds porcupine's search on one key's history. The
// histories of this module's tests take milliseconds (RELIABILITY.md,
// "Linearizability"); a search that runs this long means a history too
// large to decide, and its Unknown is a failure, never a pass.
const CheckTimeout = time.Minute

// ArtifactsEnv names the environment variable that holds the directory
// the visualizations of failed checks are written to; unset, they go to
// sluice-test-artifacts under os.TempDir().
const ArtifactsEnv = "SLUICE_TEST_ARTIFACTS"

// Verdict is porcupine's answer for one key's history.
type Verdict struct {
	// Key is the client key.
	Key string
	// Result is Ok, Illegal, or Unknown when the search timed out.
	Result porcupine.CheckResult
	// Ops is the number of decisions on the key, Admitted how many of
	// them were admitted, Indeterminate how many failed (see "Faults"),
	// and Overlapping how many overlapped in time with another decision
	// on the key (which porcupine may order either way: the concurrency
	// the check saw; an indeterminate decision overlaps every later one).
	Ops, Admitted, Indeterminate, Overlapping int
	// Took is how long the check took.
	Took time.Duration
	// View is the path of porcupine's HTML visualization of the history,
	// written when Result is not Ok (else ""); ViewErr says why it could
	// not be written.
	View    string
	ViewErr error
}

// Err returns nil for an Ok verdict and otherwise an error saying what
// failed and where its visualization is: Unknown is a failure too.
func (v Verdict) Err() error {
	switch {
	case v.Result == porcupine.Ok:
		return nil
	case v.ViewErr != nil:
		return fmt.Errorf("key %q: %d decisions: porcupine says %s (visualization not written: %v)", v.Key, v.Ops, v.Result, v.ViewErr)
	case v.Result == porcupine.Unknown:
		return fmt.Errorf("key %q: %d decisions: porcupine gave up after %v (Unknown): the history is too large to decide; shrink clients × decisions per key (visualization: %s)", v.Key, v.Ops, v.Took, v.View)
	}
	return fmt.Errorf("key %q: %d decisions: porcupine says %s: no order of the decisions explains their answers (visualization: %s)", v.Key, v.Ops, v.Result, v.View)
}

// Check checks h key by key against Model, within CheckTimeout each, and
// returns one Verdict per key, in key order. For a
// key that is not Ok it writes porcupine's visualization to
// ArtifactDir()/<name>-<key>.html, replacing the file of an earlier run
// of the same test.
func Check(name string, h History) []Verdict {
	m := Model()
	var vs []Verdict
	for _, part := range byKey(h) {
		key := part[0].Input.(Input).Key
		start := time.Now()
		res := porcupine.CheckOperationsTimeout(m, part, CheckTimeout)
		v := Verdict{Key: key, Result: res, Ops: len(part), Took: time.Since(start), Admitted: admitted(part),
			Indeterminate: indeterminate(part), Overlapping: overlapping(part)}
		if res != porcupine.Ok {
			// Again, computing what the view shows: the longest orders
			// found and where each ends.
			_, info := porcupine.CheckOperationsVerbose(m, part, CheckTimeout)
			v.View, v.ViewErr = visualize(m, info, name, key)
		}
		vs = append(vs, v)
	}
	return vs
}

// Require checks h and fails t for every key that is not Ok, logging
// each key's verdict.
func Require(t testing.TB, h History) {
	t.Helper()
	for _, v := range Check(t.Name(), h) {
		if err := v.Err(); err != nil {
			t.Error(err)
			continue
		}
		t.Logf("key %q: %d decisions (%d admitted, %d indeterminate, %d overlapping another) linearizable, checked in %v",
			v.Key, v.Ops, v.Admitted, v.Indeterminate, v.Overlapping, v.Took.Round(time.Microsecond))
	}
}

// admitted counts the admitted decisions of h.
func admitted(h []porcupine.Operation) int {
	n := 0
	for _, op := range h {
		if rs := op.Output.(Output).Results; len(rs) > 0 && sluice.Combine(rs).Allowed {
			n++
		}
	}
	return n
}

// indeterminate counts the decisions of h that failed.
func indeterminate(h []porcupine.Operation) int {
	n := 0
	for _, op := range h {
		if op.Output.(Output).Err != "" {
			n++
		}
	}
	return n
}

// overlapping counts the decisions of h whose [Call, Return] overlaps
// another's.
func overlapping(h []porcupine.Operation) int {
	ops := slices.Clone(h)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	over := make([]bool, len(ops))
	end, last := int64(math.MinInt64), -1 // the latest Return so far, and whose
	for i, op := range ops {
		if op.Call <= end {
			over[i], over[last] = true, true
		}
		if op.Return > end {
			end, last = op.Return, i
		}
	}
	n := 0
	for _, o := range over {
		if o {
			n++
		}
	}
	return n
}

// ArtifactDir returns the directory for visualizations: $ArtifactsEnv,
// or sluice-test-artifacts under os.TempDir().
func ArtifactDir() string {
	if d := os.Getenv(ArtifactsEnv); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "sluice-test-artifacts")
}

func visualize(m porcupine.Model, info porcupine.LinearizationInfo, name, key string) (string, error) {
	dir := ArtifactDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("artifact directory: %w", err)
	}
	path := filepath.Join(dir, fileName(name)+"-"+fileName(key)+".html")
	if err := porcupine.VisualizePath(m, info, path); err != nil {
		return path, fmt.Errorf("visualize %s: %w", path, err)
	}
	return path, nil
}

// fileName maps s to a file name: letters, digits, '-', '_' and '.' kept,
// everything else '_'.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}
