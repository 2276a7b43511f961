package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
)

// profiler takes and reads pprof profiles for the goals that are not met:
// of the harness process during a run, and of a go test benchmark.
type profiler struct {
	dir     string // temporary, removed by close
	testBin string // the bench package's test binary, built on first use
	err     error  // why no benchmark can be profiled, once known
}

func newProfiler() (*profiler, error) {
	dir, err := os.MkdirTemp("", "libbench-prof-")
	if err != nil {
		return nil, err
	}
	return &profiler{dir: dir}, nil
}

func (p *profiler) close() { os.RemoveAll(p.dir) }

// start starts a CPU profile of this process into a file named name; the
// returned func stops it and returns the file.
func (p *profiler) start(name string) (stop func() string, err error) {
	path := filepath.Join(p.dir, name+".cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() string {
		pprof.StopCPUProfile()
		f.Close()
		return path
	}, nil
}

// bench profiles one go test benchmark of the bench module (pattern for
// -test.bench, e.g. "^BenchmarkMemoryOneKey$/^sluice-gcra$/^serial$"):
// its CPU and its allocations (every one sampled), and returns the top
// functions of each. The module is the one of the current directory
// (make bench runs libbench in bench/).
func (p *profiler) bench(ctx context.Context, pattern string) (cpu, allocs string, err error) {
	if p.err != nil {
		return "", "", p.err
	}
	if p.testBin == "" {
		out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
		if gomod := strings.TrimSpace(string(out)); err != nil || filepath.Base(filepath.Dir(gomod)) != "bench" {
			p.err = fmt.Errorf("no profile: libbench runs outside the bench module (go env GOMOD: %q, %v)", gomod, err)
			return "", "", p.err
		}
		bin := filepath.Join(p.dir, "bench.test")
		if out, err := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, ".").CombinedOutput(); err != nil {
			p.err = fmt.Errorf("no profile: go test -c: %v: %s", err, out)
			return "", "", p.err
		}
		p.testBin = bin
	}
	name := strings.NewReplacer("^", "", "$", "", "/", "_").Replace(pattern)
	cpuFile, memFile := filepath.Join(p.dir, name+".cpu"), filepath.Join(p.dir, name+".mem")
	// Two runs: sampling every allocation would skew the CPU profile.
	for _, args := range [][]string{
		{"-test.benchtime", "2s", "-test.cpuprofile", cpuFile},
		{"-test.benchtime", "200ms", "-test.memprofile", memFile, "-test.memprofilerate", "1"},
	} {
		cmd := exec.CommandContext(ctx, p.testBin, append([]string{"-test.run", "^$", "-test.bench", pattern}, args...)...)
		cmd.Dir = p.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("profile of %s: %v: %s", pattern, err, out)
		}
	}
	if cpu, err = topFunctions(ctx, cpuFile, "", 5); err != nil {
		return "", "", err
	}
	if allocs, err = topFunctions(ctx, memFile, "alloc_objects", 3); err != nil {
		return "", "", err
	}
	return cpu, allocs, nil
}

// topFunctions returns the n functions of profile with the most flat
// samples (of sampleIndex, "" for the default) and their shares, from
// go tool pprof -top.
func topFunctions(ctx context.Context, profile, sampleIndex string, n int) (string, error) {
	args := []string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", n)}
	if sampleIndex != "" {
		args = append(args, "-sample_index="+sampleIndex)
	}
	out, err := exec.CommandContext(ctx, "go", append(args, profile)...).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof -top %s: %w", filepath.Base(profile), err)
	}
	return parseTop(string(out), n), nil
}

// parseTop reads go tool pprof -top output: after the header line
// ("flat  flat%   sum%        cum   cum%"), rows of flat, flat%, sum%, cum,
// cum% and the function. It returns "function flat%" of the first n,
// comma-separated, or "no samples".
func parseTop(out string, n int) string {
	var parts []string
	rows := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == "flat" && f[1] == "flat%" {
			rows = true
			continue
		}
		if !rows || len(f) < 6 || len(parts) == n {
			continue
		}
		parts = append(parts, strings.Join(f[5:], " ")+" "+f[1])
	}
	if len(parts) == 0 {
		return "no samples"
	}
	return strings.Join(parts, ", ")
}
