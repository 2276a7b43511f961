package cdp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/cdp"
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cdp.Start(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

const page = `<!doctype html><title>cdp test</title>
<style>body{margin:0;background:rgb(255,0,0)}</style>
<p id="out">waiting</p>
<script>setTimeout(() => { document.getElementById("out").textContent = "ready " + (6*7); }, 300);</script>`

func TestCDPPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, page)
	}))
	defer srv.Close()
	b := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx, "about:blank")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Navigate(ctx, srv.URL); err != nil {
		t.Fatal(err)
	}
	var title string
	if err := p.Evaluate(ctx, "document.title", &title); err != nil || title != "cdp test" {
		t.Errorf("title %q %v, want cdp test", title, err)
	}
	if err := p.WaitFor(ctx, `document.getElementById("out").textContent.startsWith("ready")`); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Text string `json:"text"`
		N    int    `json:"n"`
	}
	if err := p.Evaluate(ctx, `({text: document.getElementById("out").textContent, n: document.querySelectorAll("p").length})`, &out); err != nil || out.Text != "ready 42" || out.N != 1 {
		t.Errorf("evaluate: %+v %v, want ready 42 and 1", out, err)
	}
	var v int
	if err := p.Evaluate(ctx, `new Promise(r => setTimeout(() => r(7), 50))`, &v); err != nil || v != 7 {
		t.Errorf("a promise: %d %v, want 7", v, err)
	}
	var ex *cdp.ExceptionError
	if err := p.Evaluate(ctx, `nope.nothing`, nil); !errors.As(err, &ex) || !strings.Contains(ex.Text, "nope is not defined") {
		t.Errorf("an exception: %v, want an ExceptionError saying nope is not defined", err)
	}
	if errs := p.Errors(); len(errs) != 0 {
		t.Errorf("errors of a page without any: %q", errs)
	}
	// An uncaught exception and a console.error: each is one of the
	// page's errors.
	if err := p.Evaluate(ctx, `setTimeout(() => { throw new Error("boom-1") }, 0); console.error("boom-2", 3); 0`, nil); err != nil {
		t.Fatal(err)
	}
	var errs []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if errs = p.Errors(); len(errs) >= 2 {
			break
		}
	}
	all := strings.Join(errs, "\n")
	if !strings.Contains(all, "boom-1") || !strings.Contains(all, `console.error: "boom-2" 3`) {
		t.Errorf("errors %q, want the uncaught boom-1 and the console.error boom-2", errs)
	}
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if err := p.WaitFor(short, "false"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitFor a false condition: %v, want the deadline", err)
	}
	if err := p.SetViewport(ctx, 640, 480); err != nil {
		t.Fatal(err)
	}
	for _, full := range []bool{false, true} {
		shot, err := p.Screenshot(ctx, full)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(shot))
		if err != nil {
			t.Fatalf("screenshot (full %v) is no PNG: %v", full, err)
		}
		if sz := img.Bounds().Size(); sz.X != 640 || sz.Y != 480 {
			t.Errorf("screenshot (full %v) %v, want 640x480", full, sz)
		}
		if r, g, bl, _ := img.At(600, 400).RGBA(); r>>8 != 255 || g != 0 || bl != 0 {
			t.Errorf("screenshot pixel %d,%d,%d, want the page's red", r>>8, g>>8, bl>>8)
		}
	}
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
