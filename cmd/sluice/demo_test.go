package main

import (
	"errors"
	"net"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
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

// TestDemo: with nothing configured, the demo starts redis-server from
// PATH, shows 3 x the limit in memory and exactly the limit with Redis,
// and leaves no redis-server behind.
func TestDemo(t *testing.T) {
	out, errOut, code := runBinary(t, nil, "demo")
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
	if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		c.Close()
		t.Errorf("something still listens on %s, where the demo's redis-server was", m[1])
	}
}

// TestDemoRedisURL: with SLUICE_REDIS_URL the demo uses that server, and
// the limit holds exactly for every algorithm, replica count and limit.
func TestDemoRedisURL(t *testing.T) {
	srv := redistest.Start(t)
	for i, a := range sluice.Algorithms {
		replicas, limit := 2+i%3, 5+i
		t.Run(string(a), func(t *testing.T) {
			out, errOut, code := runBinary(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr},
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
	out, errOut, code := runBinary(t, []string{"PATH=" + t.TempDir(), "SLUICE_REDIS_URL="}, "demo")
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
			_, errOut, code := runBinary(t, nil, append([]string{"demo"}, tt.args...)...)
			if !strings.Contains(errOut, tt.want) {
				t.Errorf("stderr %q lacks %q", errOut, tt.want)
			}
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
		})
	}
}
