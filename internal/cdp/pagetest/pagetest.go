// Package pagetest holds what the tests of sluice's two browser drivers
// (internal/cdp for Chromium, internal/bidi for Firefox) and the
// dashboard's tests share: the Page both drive, and one check of a
// driver's page that each driver's tests run.
package pagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/cdp"
)

// Page is a browser tab as both drivers drive it (*cdp.Page,
// *bidi.Page).
type Page interface {
	Navigate(ctx context.Context, url string) error
	Evaluate(ctx context.Context, expr string, out any) error
	WaitFor(ctx context.Context, cond string) error
	SetViewport(ctx context.Context, width, height int) error
	Screenshot(ctx context.Context, full bool) ([]byte, error)
	Errors() []string
	Close()
}

// page is the page Run loads: red, with a paragraph a script fills in
// after 300 ms.
const page = `<!doctype html><title>browser test</title>
<style>body{margin:0;background:rgb(255,0,0)}</style>
<p id="out">waiting</p>
<script>setTimeout(() => { document.getElementById("out").textContent = "ready " + (6*7); }, 300);</script>`

// Run checks a driver's page, opened by open at about:blank: navigating,
// reading the DOM, awaiting a promise, an exception as a
// *cdp.ExceptionError, the page's errors (an uncaught exception and a
// console.error), a bounded WaitFor, the viewport and screenshots. It
// returns the page, still open (closed when t ends), with those two
// errors reported, for a driver's own checks.
func Run(t *testing.T, open func(ctx context.Context, url string) (Page, error)) Page {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			// The icon the browser asks for itself: nothing, without an
			// error of the page's.
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, page)
	}))
	t.Cleanup(srv.Close)
	ctx := Context(t)
	p, err := open(ctx, "about:blank")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.Navigate(ctx, srv.URL); err != nil {
		t.Fatal(err)
	}
	var title string
	if err := p.Evaluate(ctx, "document.title", &title); err != nil || title != "browser test" {
		t.Errorf("title %q %v, want browser test", title, err)
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
	errs := WaitErrors(p, 2)
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
	return p
}

// cleanupMargin is how long before the test binary's deadline Context
// ends: time for a failing test's cleanups, which close the browser (10 s
// at most each), to run before go test's -timeout panics.
const cleanupMargin = 30 * time.Second

// Context returns the context a browser test waits under: it ends when t
// does, or cleanupMargin before the test binary's deadline (go test
// -timeout), so that a hang fails t saying what it waited for. It has no
// bound of its own: a browser starting on two cores starved of CPU takes
// tens of seconds (Firefox took 51 s beside make stress's CPU hog and
// other builds), and a fixed minute around the start and the page failed
// tests where nothing was wrong. A test waits for its condition; only a
// hang ends it.
func Context(t *testing.T) context.Context {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-cleanupMargin))
		t.Cleanup(cancel)
	}
	return ctx
}

// WaitErrors waits (at most 20 s) until p reported n errors, and returns
// them.
func WaitErrors(p Page, n int) []string {
	var errs []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if errs = p.Errors(); len(errs) >= n {
			break
		}
	}
	return errs
}
