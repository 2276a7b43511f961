package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// micro holds go test benchmark results by name (without the -GOMAXPROCS
// suffix): every run's value of each unit, e.g. "ns/op", "allocs/op".
type micro map[string]map[string][]float64

// procsSuffix is the -N that go test appends to a benchmark's name.
var procsSuffix = regexp.MustCompile(`-\d+$`)

// parseMicro reads go test -bench output. Lines that are not results
// (goos:, PASS, ok ...) are skipped; a result line that does not parse is
// an error.
func parseMicro(r io.Reader) (micro, error) {
	m := micro{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if len(f) < 4 || len(f)%2 != 0 {
			return nil, fmt.Errorf("line %d: %q is not a benchmark result (name, iterations, then value and unit pairs)", n, sc.Text())
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			return nil, fmt.Errorf("line %d: iterations %q: %w", n, f[1], err)
		}
		name := procsSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		if m[name] == nil {
			m[name] = map[string][]float64{}
		}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: value %q of %s: %w", n, f[i], f[i+1], err)
			}
			m[name][f[i+1]] = append(m[name][f[i+1]], v)
		}
	}
	return m, sc.Err()
}

// get returns the median of name's values in unit, and whether there
// were any.
func (m micro) get(name, unit string) (float64, bool) {
	vs := m[name][unit]
	if len(vs) == 0 {
		return 0, false
	}
	return median(vs), true
}
