//go:build e2e

package node_test

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSlotsExample runs the README's concurrency example as it is:
// example/slots.js, with sluice.js beside it, against a sluice serve of
// example/sluice.yaml. Exports 1 and 2 run, export 3 asked for while they
// run is refused, and once they have ended it runs; the process exits on
// its own (the keepAlive timers do not hold it), and every slot is free
// after (each was released, not left to its lease).
func TestSlotsExample(t *testing.T) {
	node := needNode(t)
	s := startSluice(t, buildSluice(t), true, nil, "--config", "example/sluice.yaml")

	dir := exampleDir(t, "example/slots.js")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "slots.js")
	cmd.Dir = dir
	cmd.Env = nodeEnv([]string{"SLUICE_URL=" + s.url})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node slots.js: %v\n%s", err, out)
	}
	want := "export 1 running\nexport 2 running\nexport 3 refused: 2 exports running\nexport 3 running\n"
	if string(out) != want {
		t.Errorf("node slots.js printed\n%s\nwant\n%s", out, want)
	}

	resp, err := http.Post(s.url+"/v1/check", "application/json", strings.NewReader(`{"rule":"exports","key":"tenant-7","cost":0}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get("X-RateLimit-Remaining"); resp.StatusCode != http.StatusOK || got != "2" {
		t.Errorf("after node slots.js: %d, X-RateLimit-Remaining %q; want 200 and both slots free", resp.StatusCode, got)
	}
}
