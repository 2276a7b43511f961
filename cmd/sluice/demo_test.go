//go:build integration

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redisproc"
	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// demoRow returns the numbers of the table row for store: admitted per
// replica, then the total and the limit.
func demoRow(t *testing.T, out, store string) []int {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != store {
			continue
		}
		var ns []int
		for _, f := range fields[1:] {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("row %q: %v", line, err)
			}
			ns = append(ns, n)
		}
		return ns
	}
	t.Fatalf("no %s row in the demo's output:\n%s", store, out)
	return nil
}

// checkDemo checks the table: in memory every replica admits the whole
// limit; with Redis all of them together admit exactly the limit.
func checkDemo(t *testing.T, out string, replicas, limit int) {
	t.Helper()
	mem := demoRow(t, out, "in-memory")
	if len(mem) != replicas+2 {
		t.Fatalf("in-memory row %v: want %d replicas, total, limit", mem, replicas)
	}
	for i, n := range mem[:replicas] {
		if n != limit {
			t.Errorf("in memory, replica %d admitted %d; want the whole limit %d", i+1, n, limit)
		}
	}
	if mem[replicas] != replicas*limit || mem[replicas+1] != limit {
		t.Errorf("in-memory total and limit %v; want %d and %d", mem[replicas:], replicas*limit, limit)
	}
	rs := demoRow(t, out, "redis")
	if len(rs) != replicas+2 {
		t.Fatalf("redis row %v: want %d replicas, total, limit", rs, replicas)
	}
	sum := 0
	for _, n := range rs[:replicas] {
		sum += n
	}
	if sum != limit || rs[replicas] != limit || rs[replicas+1] != limit {
		t.Errorf("redis row %v: want replicas summing to exactly the limit %d", rs, limit)
	}
	if !strings.Contains(out, "Redis, one atomic script per decision: exactly the limit.") {
		t.Errorf("the demo does not conclude that Redis held the limit:\n%s", out)
	}
}

// demoEnv is the environment of a demo run: none of the demo's variables
// from the test's own environment, and a temporary directory of the
// test's, plus extra.
func demoEnv(t *testing.T, extra ...string) []string {
	env := []string{"TMPDIR=" + t.TempDir()}
	for _, v := range []string{"SLUICE_REDIS_URL", "SLUICE_DEMO_REPLICAS", "SLUICE_DEMO_LIMIT", "SLUICE_DEMO_REQUESTS",
		"SLUICE_DEMO_CONCURRENCY", "SLUICE_DEMO_ALGORITHM"} {
		env = append(env, v+"=")
	}
	return append(env, extra...)
}

// TestDemo: with nothing configured, the demo starts redis-server from
// PATH, shows 3 x the limit in memory and exactly the limit with Redis,
// and leaves no redis-server behind.
func TestDemo(t *testing.T) {
	redistest.Need(t)
	out, errOut, code := runBinary(t, demoEnv(t), "demo")
	if code != 0 {
		t.Fatalf("sluice demo exited %d: %s\n%s", code, errOut, out)
	}
	t.Logf("sluice demo:\n%s", out)
	checkDemo(t, out, 3, 10)
	m := regexp.MustCompile(`started for the demo on (\S+) as pid (\d+), now stopped`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the demo does not say which redis-server it started:\n%s", out)
	}
	pid, _ := strconv.Atoi(m[2])
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("redis-server pid %d still exists after the demo (kill -0: %v)", pid, err)
	}
}

// TestDemoKilled: a demo killed by SIGKILL, which it cannot handle, still
// leaves no redis-server behind: the kernel kills it with its parent.
func TestDemoKilled(t *testing.T) {
	redistest.Need(t)
	cmd := exec.Command(binary, "demo", "--requests", "6000", "--concurrency", "8")
	cmd.Env = append(os.Environ(), demoEnv(t)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	var child int
	for deadline := time.Now().Add(30 * time.Second); child == 0; time.Sleep(5 * time.Millisecond) {
		select {
		case <-done:
			t.Fatal("the demo ended before its redis-server was seen")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no redis-server child of the demo within 30s")
		}
		child = childNamed(t, cmd.Process.Pid, "redis-server")
	}
	// Kill the demo only once its redis-server serves: one still starting
	// may die of writing its start-up lines to the dead demo's pipe, which
	// would pass this test without the mechanism it is about.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if addr := redisAddr(child); addr != "" && redisproc.Ping(addr) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo's redis-server (pid %d, command line %q) did not answer PING within 30s", child, cmdline(child))
		}
	}
	select {
	case <-done:
		t.Fatal("the demo ended before it could be killed during its Redis half; give it more --requests")
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(child, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child)); strings.Contains(string(stat), ") Z ") {
			break // dead, waiting to be reaped by init
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("redis-server (pid %d) outlived the demo killed by SIGKILL", child)
		}
	}
}

// redisAddr returns the loopback address redis-server pid listens on,
// read from its command line, or "" while that does not say. The server
// rewrites its command line once it runs, from "redis-server ... --port
// N ..." to "redis-server 127.0.0.1:N", so either form may be there.
func redisAddr(pid int) string {
	args := cmdline(pid)
	if i := slices.Index(args, "--port"); i >= 0 && i+1 < len(args) {
		return "127.0.0.1:" + args[i+1]
	}
	if len(args) > 0 {
		if m := regexp.MustCompile(`^\S*redis-server (127\.0\.0\.1:\d+)`).FindStringSubmatch(args[0]); m != nil {
			return m[1]
		}
	}
	return ""
}

// cmdline returns the command line of process pid, or nil.
func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// childNamed returns the pid of a child process of parent whose command is
// name, or 0 (from /proc/<pid>/stat: "pid (comm) state ppid ...").
func childNamed(t *testing.T, parent int, name string) int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != name {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(parent) {
			pid, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
			return pid
		}
	}
	return 0
}

// TestDemoRedisURL: with SLUICE_REDIS_URL the demo uses that server, and
// the limit holds exactly for every algorithm, replica count and limit.
func TestDemoRedisURL(t *testing.T) {
	srv := redistest.Start(t)
	for i, a := range sluice.Algorithms {
		replicas, limit := 2+i%3, 5+i
		t.Run(string(a), func(t *testing.T) {
			out, errOut, code := runBinary(t, demoEnv(t, "SLUICE_REDIS_URL=redis://"+srv.Addr),
				"demo", "--algorithm", string(a), "--replicas", strconv.Itoa(replicas), "--limit", strconv.Itoa(limit))
			if code != 0 {
				t.Fatalf("sluice demo exited %d: %s\n%s", code, errOut, out)
			}
			checkDemo(t, out, replicas, limit)
			if !strings.Contains(out, "the server of --redis or SLUICE_REDIS_URL") {
				t.Errorf("the demo does not say it used SLUICE_REDIS_URL:\n%s", out)
			}
		})
	}
}

// TestDemoWithoutRedis: without redis-server in PATH, the demo shows the
// in-memory half, then says exactly how to get a Redis, and fails.
func TestDemoWithoutRedis(t *testing.T) {
	out, errOut, code := runBinary(t, demoEnv(t, "PATH="+t.TempDir()), "demo")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if mem := demoRow(t, out, "in-memory"); len(mem) != 5 || mem[3] != 30 {
		t.Errorf("in-memory row %v: want 3 replicas admitting 30 in all", mem)
	}
	for _, want := range []string{"no redis-server in PATH", "apt-get install -y redis-server", "SLUICE_REDIS_URL=redis://"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestDemoUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "0"}, "--replicas 0 is not between 1 and 16"},
		{[]string{"--replicas", "17"}, "--replicas 17 is not between 1 and 16"},
		{[]string{"--limit", "0"}, "--limit 0 is not between 1 and 1000"},
		{[]string{"--concurrency", "65"}, "--concurrency 65 is not between 1 and 64"},
		{[]string{"--requests", "-1"}, "--requests -1 is not between 0 and 100000"},
		{[]string{"--algorithm", "leaky"}, `algorithm "leaky" is not one of`},
		{[]string{"--redis", "http://x"}, "invalid Redis URL"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, errOut, code := runBinary(t, demoEnv(t), append([]string{"demo"}, tt.args...)...)
			if !strings.Contains(errOut, tt.want) {
				t.Errorf("stderr %q lacks %q", errOut, tt.want)
			}
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
		})
	}
}
