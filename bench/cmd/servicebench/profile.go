package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A profile's CPU, by where it went: the share of the samples in each
// category, largest first.
type share struct {
	category string
	percent  float64
}

// categories sorts a function into where its time goes, the first
// prefix that matches deciding; runtime functions are sorted apart
// (runtimeCategory).
var categories = []struct{ name, prefixes string }{
	{"sluice", "github.com/sluice-go/sluice main."},
	{"Redis client (rueidis)", "github.com/redis/rueidis"},
	{"gRPC and HTTP/2", "google.golang.org/grpc golang.org/x/net/http2"},
	{"protobuf", "google.golang.org/protobuf"},
	{"net/http", "net/http net/textproto net/url mime bufio"},
	{"JSON", "encoding/json"},
	{"metrics (prometheus)", "github.com/prometheus"},
	{"syscalls (network I/O)", "syscall. internal/runtime/syscall internal/poll net. runtime/internal/syscall"},
	{"Go library (context, time, sync, reflect...)", "context. time. sync. reflect. io. slices. sort. bytes. strings. strconv. internal/bytealg internal/strconv internal/reflectlite internal/sync internal/godebug internal/abi unicode math log/ errors. fmt. maps. vendor/"},
}

// category returns fn's category.
func category(fn string) string {
	for _, c := range categories {
		for _, p := range strings.Fields(c.prefixes) {
			if strings.HasPrefix(fn, p) {
				return c.name
			}
		}
	}
	if strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/runtime") || !strings.Contains(fn, ".") {
		// (and the runtime's assembly: aeshashbody, memeqbody, gogo...)
		for _, gc := range []string{"gc", "malloc", "mark", "sweep", "scan", "span", "heap", "alloc", "memclr", "greyobject", "findObject", "wbBuf", "bulkBarrier"} {
			if strings.Contains(strings.ToLower(fn), strings.ToLower(gc)) {
				return "GC and allocation"
			}
		}
		return "Go scheduler and runtime"
	}
	return "other"
}

// profileServer fetches a CPU profile of seconds from the pprof listener
// at addr into dir/name.pprof, while the caller drives the server.
func profileServer(ctx context.Context, addr string, seconds int, dir, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/profile?seconds="+strconv.Itoa(seconds), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return "", fmt.Errorf("pprof: %s: %s", resp.Status, msg)
	}
	path := filepath.Join(dir, name+".pprof")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// profileShares is what a profile says: the shares of its samples by
// category, largest first, and the cumulative shares (with what they
// call) of sluice's request handler and of its store calls.
type profileShares struct {
	byCategory     []share
	handler, store float64
}

// The functions whose cumulative share profileShares reports: sluice's
// doors, and the instrumented store (package metrics) that sluice serve
// wraps every store in.
var (
	handlerFuncs = []string{"github.com/sluice-go/sluice/server.(*Server).ServeHTTP", "github.com/sluice-go/sluice/envoy.(*Service).ShouldRateLimit"}
	storePrefix  = "github.com/sluice-go/sluice/metrics.(*store)."
)

// shares reads the profile at path with `go tool pprof -top` and returns
// what it says.
func shares(ctx context.Context, path string) (*profileShares, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0", path).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof -top %s: %w", path, err)
	}
	by := map[string]float64{}
	total := 0.0
	ps := &profileShares{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		// flat flat% sum% cum cum% function...
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		d, err := time.ParseDuration(f[0])
		if err != nil {
			continue // the header
		}
		by[category(f[5])] += d.Seconds()
		total += d.Seconds()
		cum, err := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err != nil {
			continue
		}
		switch fn := f[5]; {
		case slices.Contains(handlerFuncs, fn):
			ps.handler = max(ps.handler, cum)
		case strings.HasPrefix(fn, storePrefix):
			ps.store = max(ps.store, cum)
		}
	}
	if total == 0 {
		return nil, fmt.Errorf("%s: no samples", path)
	}
	var s []share
	for c, v := range by {
		s = append(s, share{c, 100 * v / total})
	}
	ps.byCategory = s
	slices.SortFunc(s, func(a, b share) int {
		if a.percent != b.percent {
			if a.percent > b.percent {
				return -1
			}
			return 1
		}
		return strings.Compare(a.category, b.category)
	})
	return ps, nil
}

// sharesText writes what a profile says: "sluice's handler 31% with what
// it calls (its store calls 10%); by package, where the time itself is
// spent: 31% gRPC and HTTP/2, 22% syscalls (network I/O), ...", the
// packages of at least 3%.
func sharesText(ps *profileShares) string {
	var parts []string
	for _, x := range ps.byCategory {
		if x.percent >= 3 || len(parts) == 0 {
			parts = append(parts, fmt.Sprintf("%.0f%% %s", x.percent, x.category))
		}
	}
	return fmt.Sprintf("sluice's handler %.0f%% with what it calls (its store calls %.0f%%), the rest the server's transport; by package, where the time itself goes: %s",
		ps.handler, ps.store, strings.Join(parts, ", "))
}
