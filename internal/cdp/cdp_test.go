package cdp_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/sluice-go/sluice/internal/cdp"
	"github.com/sluice-go/sluice/internal/cdp/pagetest"
)

// start starts a browser for t, stopped when t ends. Under -short it
// skips; otherwise a missing Chromium fails the test.
func start(t *testing.T) *cdp.Browser {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Chromium; skipped under -short")
	}
	path, err := cdp.Find()
	if err != nil {
		t.Fatal(err)
	}
	b, err := cdp.Start(pagetest.Context(t), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestCDPPage: the page check both drivers pass (pagetest.Run).
func TestCDPPage(t *testing.T) {
	b := start(t)
	pagetest.Run(t, func(ctx context.Context, url string) (pagetest.Page, error) { return b.NewPage(ctx, url) })
}

// TestCDPClose: Close ends the browser and every process of its group
// (zombies aside: their parent, once the browser dies, is init's to reap).
func TestCDPClose(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	b := start(t)
	pid := b.Pid()
	if n := liveInGroup(t, pid); n == 0 {
		t.Fatalf("no live process in the browser's group %d", pid)
	}
	b.Close()
	if n := liveInGroup(t, pid); n != 0 {
		t.Errorf("after Close, %d live processes in the browser's group %d", n, pid)
	}
}

// liveInGroup counts the processes of group pgid that are not zombies.
func liveInGroup(t *testing.T, pgid int) int {
	t.Helper()
	n, err := cdp.LiveInGroup(pgid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCDPFindMissing(t *testing.T) {
	t.Setenv(cdp.EnvBrowser, "/nonexistent/chromium")
	if _, err := cdp.Find(); err == nil {
		t.Error("Find with $SLUICE_CHROMIUM naming no program: no error")
	}
}
