//go:build e2e

package main

// The control of the dashboard's browser tests: each browser, as
// browser_e2e_test.go drives it, reads the DOM, awaits a promise, reports
// an exception, the page's errors (which the dashboard's tests require to
// be none), a bounded wait, the viewport and screenshots, and leaves no
// process behind.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// harnessPage is the page TestBrowserPage loads: red, with a paragraph a
// script fills in after 300 ms.
const harnessPage = `<!doctype html><title>browser test</title>
<style>body{margin:0;background:rgb(255,0,0)}</style>
<p id="out">waiting</p>
<script>setTimeout(() => { document.getElementById("out").textContent = "ready " + (6*7); }, 300);</script>`

// cspPage is a page whose Content-Security-Policy refuses its inline
// script, and whose script and image are not found.
const cspPage = `<!doctype html><title>csp</title><script>document.title = "ran"</script><script src="/missing.js"></script><img src="/missing.png">`

// cspViolation matches how each browser words a refusal by a page's
// Content-Security-Policy.
var cspViolation = regexp.MustCompile(`(?i)content.security.policy`)

// TestBrowserPage: each browser's page navigates, reads the DOM, awaits a
// promise, fails an expression that throws, and reports as the page's
// errors an uncaught exception, a console.error, a script its
// Content-Security-Policy refuses and a script and an image that are not
// found (not the icon the browser asks for itself), and nothing else; a
// wait for a false condition ends with its context; screenshots are as
// large as the viewport, of the page's colour. Once the test is done, no
// process the browser started is left running.
func TestBrowserPage(t *testing.T) {
	for _, br := range browsers {
		t.Run(br.name, func(t *testing.T) {
			path := findBrowser(t, br)
			// The icon the browser asks for itself (the page names none):
			// Chromium reports a 404 of it as the page's error, as it does
			// on the dashboard, which names its icon; Firefox's driver
			// leaves it out, which the 404 checks.
			icon := http.StatusNoContent
			if br.name == firefox.name {
				icon = http.StatusNotFound
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/":
					w.Header().Set("Content-Type", "text/html")
					fmt.Fprint(w, harnessPage)
				case "/csp":
					w.Header().Set("Content-Type", "text/html")
					w.Header().Set("Content-Security-Policy", "default-src 'self'")
					fmt.Fprint(w, cspPage)
				case "/favicon.ico":
					w.WriteHeader(icon)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			var procs []process
			t.Run("page", func(t *testing.T) {
				ctx := browserContext(t)
				p, _ := br.open(ctx, t, path)
				checkPage(ctx, t, p, srv.URL)
				procs = processTree(t, p.Pid())
			})
			if runtime.GOOS != "linux" {
				return // processTree reads /proc
			}
			if len(procs) == 0 {
				t.Fatal("no process of the browser found while it ran")
			}
			// The page's cleanups have run: they stop what they started.
			if live := liveProcesses(procs); len(live) != 0 {
				t.Errorf("%d of the %d processes of %s still run after the test: %v", len(live), len(procs), br.name, live)
			}
		})
	}
}

// checkPage runs TestBrowserPage's checks of p, against the server at
// base.
func checkPage(ctx context.Context, t *testing.T, p browserPage, base string) {
	t.Helper()
	if err := p.Navigate(ctx, base+"/"); err != nil {
		t.Fatal(err)
	}
	var title string
	if err := p.Evaluate(ctx, "document.title", &title); err != nil || title != "browser test" {
		t.Errorf("title %q %v, want browser test", title, err)
	}
	if err := waitFor(ctx, p, `document.getElementById("out").textContent.startsWith("ready")`); err != nil {
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
	if err := p.Evaluate(ctx, `nope.nothing`, nil); err == nil || !strings.Contains(err.Error(), "nope is not defined") {
		t.Errorf("an exception: %v, want an error saying nope is not defined", err)
	}
	if err := p.Evaluate(ctx, `undefined`, &v); err == nil || !strings.Contains(err.Error(), "undefined") {
		t.Errorf("undefined into an int: %v, want an error saying undefined", err)
	}
	if errs := p.Errors(); len(errs) != 0 {
		t.Errorf("errors of a page without any: %q", errs)
	}
	// An uncaught exception and a console.error: each is one of the
	// page's errors.
	if err := p.Evaluate(ctx, `setTimeout(() => { throw new Error("boom-1") }, 0); console.error("boom-2", 3); 0`, nil); err != nil {
		t.Fatal(err)
	}
	errs := waitErrors(p, 2)
	if all := strings.Join(errs, "\n"); len(errs) != 2 || !strings.Contains(all, "boom-1") || !strings.Contains(all, "boom-2 3") {
		t.Errorf("errors %q, want the uncaught boom-1 and the console.error boom-2 3", errs)
	}
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if err := waitFor(short, p, "false"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waitFor a false condition: %v, want the deadline", err)
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

	if err := p.Navigate(ctx, base+"/csp"); err != nil {
		t.Fatal(err)
	}
	if err := p.Evaluate(ctx, "document.title", &title); err != nil || title != "csp" {
		t.Errorf("title %q %v, want csp: the policy refuses the inline script", title, err)
	}
	if errs = waitErrors(p, 5); len(errs) >= 2 {
		errs = errs[2:] // the first page's
	}
	all := strings.Join(errs, "\n")
	if !cspViolation.MatchString(all) || !strings.Contains(all, "/missing.js") || !strings.Contains(all, "/missing.png") || strings.Contains(all, "favicon") {
		t.Errorf("errors %q, want the refused inline script, the missing script and the missing image (and not the icon the browser looked for)", errs)
	}
}

// process is a process of /proc, named by its pid and its start time
// (so that a pid used again is not taken for it).
type process struct {
	pid   int
	start string
	comm  string
}

func (p process) String() string { return strconv.Itoa(p.pid) + " " + p.comm }

// readProcess reads /proc/pid/stat: the process, its parent, and whether
// it runs (is neither a zombie nor dead).
func readProcess(pid int) (p process, ppid int, running bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return process{}, 0, false // gone
	}
	// pid (comm) state ppid pgrp ... starttime (the 22nd): comm may hold
	// spaces and parentheses.
	head, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 20 {
		return process{}, 0, false
	}
	_, comm, _ := strings.Cut(head, " (")
	ppid, _ = strconv.Atoi(f[1])
	return process{pid: pid, start: f[19], comm: comm}, ppid, f[0] != "Z" && f[0] != "X"
}

// processTree returns the running process root and its descendants.
func processTree(t *testing.T, root int) []process {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	children := map[int][]int{}
	byPid := map[int]process{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if p, ppid, running := readProcess(pid); running {
			byPid[pid] = p
			children[ppid] = append(children[ppid], pid)
		}
	}
	var tree []process
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		if p, ok := byPid[queue[0]]; ok {
			tree = append(tree, p)
			queue = append(queue, children[p.pid]...)
		}
	}
	return tree
}

// liveProcesses returns those of procs that still run.
func liveProcesses(procs []process) []process {
	var live []process
	for _, p := range procs {
		if q, _, running := readProcess(p.pid); running && q.start == p.start {
			live = append(live, p)
		}
	}
	return live
}
