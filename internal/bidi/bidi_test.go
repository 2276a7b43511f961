package bidi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/cdp"
)

// start starts a browser for t, stopped when t ends. Under -short it
// skips; otherwise a missing Firefox fails the test.
func start(t *testing.T) *Browser {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Firefox; skipped under -short")
	}
	path, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := Start(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

const page = `<!doctype html><title>bidi test</title>
<style>body{margin:0;background:rgb(255,0,0)}</style>
<p id="out">waiting</p>
<script>setTimeout(() => { document.getElementById("out").textContent = "ready " + (6*7); }, 300);</script>`

// TestBiDiPage: a page's DOM read, promises awaited, exceptions and the
// page's errors reported, screenshots taken.
func TestBiDiPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, page)
		case "/csp":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Security-Policy", "default-src 'self'")
			fmt.Fprint(w, `<!doctype html><title>csp</title><script>document.title = "ran"</script><script src="/missing.js"></script><img src="/missing.png">`)
		default:
			http.NotFound(w, r)
		}
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
	if err := p.Evaluate(ctx, "document.title", &title); err != nil || title != "bidi test" {
		t.Errorf("title %q %v, want bidi test", title, err)
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
	if err := p.Evaluate(ctx, `undefined`, &v); err == nil || !strings.Contains(err.Error(), "undefined") {
		t.Errorf("undefined into an int: %v, want an error saying undefined", err)
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
	errs := waitErrors(p, 2)
	all := strings.Join(errs, "\n")
	if !strings.Contains(all, "Error: boom-1") || !strings.Contains(all, `console.error: "boom-2" 3`) {
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

	// Another tab: its errors are its own. An inline script its
	// Content-Security-Policy refuses, a script and an image that are not
	// found; not /favicon.ico, which the browser asks for itself.
	q, err := b.NewPage(ctx, srv.URL+"/csp")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Evaluate(ctx, "document.title", &title); err != nil || title != "csp" {
		t.Errorf("title %q %v, want csp: the policy refuses the inline script", title, err)
	}
	errs = waitErrors(q, 3)
	all = strings.Join(errs, "\n")
	if !strings.Contains(all, "Content-Security-Policy") || !strings.Contains(all, "/missing.js") || !strings.Contains(all, "/missing.png") || strings.Contains(all, "favicon") {
		t.Errorf("errors %q, want the refused inline script, the missing script and the missing image (and not the icon the browser looked for)", errs)
	}
	if n := len(p.Errors()); n != 2 {
		t.Errorf("the first tab has %d errors after the second's, want its 2: %q", n, p.Errors())
	}
}

// waitErrors waits (at most 20 s) until p reported n errors, and returns them.
func waitErrors(p *Page, n int) []string {
	var errs []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if errs = p.Errors(); len(errs) >= n {
			break
		}
	}
	return errs
}

// TestBiDiClose: Close ends the browser and every process of its group.
func TestBiDiClose(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	b := start(t)
	pid := b.Pid()
	if n, err := cdp.LiveInGroup(pid); err != nil || n == 0 {
		t.Fatalf("no live process in the browser's group %d: %v", pid, err)
	}
	b.Close()
	if n, err := cdp.LiveInGroup(pid); err != nil || n != 0 {
		t.Errorf("after Close, %d live processes in the browser's group %d (%v)", n, pid, err)
	}
}

func TestBiDiFindMissing(t *testing.T) {
	t.Setenv(EnvBrowser, "/nonexistent/firefox")
	if _, err := Find(); err == nil {
		t.Error("Find with $SLUICE_FIREFOX naming no program: no error")
	}
}

// TestBiDiJSONValue: remote values as JSON.parse(JSON.stringify(v))
// would give them.
func TestBiDiJSONValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
		err  string // in the error, "" none
	}{
		{`{"type":"string","value":"a\"b"}`, "a\"b", ""},
		{`{"type":"number","value":42.5}`, 42.5, ""},
		{`{"type":"number","value":"-0"}`, math.Copysign(0, -1), ""},
		{`{"type":"number","value":"NaN"}`, nil, ""},
		{`{"type":"number","value":"Infinity"}`, nil, ""},
		{`{"type":"boolean","value":true}`, true, ""},
		{`{"type":"null"}`, nil, ""},
		{`{"type":"undefined"}`, undefined, ""},
		{`{"type":"array","value":[{"type":"number","value":1},{"type":"undefined"},{"type":"string","value":"x"}]}`, []any{1.0, nil, "x"}, ""},
		{`{"type":"object","value":[["a",{"type":"number","value":1}],["u",{"type":"undefined"}],["o",{"type":"object","value":[["b",{"type":"array","value":[]}]]}]]}`,
			map[string]any{"a": 1.0, "o": map[string]any{"b": []any{}}}, ""},
		{`{"type":"map","value":[[{"type":"number","value":1},{"type":"string","value":"one"}]]}`, map[string]any{"1": "one"}, ""},
		{`{"type":"function"}`, nil, "function has no JSON value"},
		{`{"type":"array","value":[{"type":"node"}]}`, nil, "node has no JSON value"},
		{`{"type":"object"}`, nil, "object"},
		{`[1]`, nil, "remote value"},
	} {
		got, err := jsonValue(json.RawMessage(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, %v; want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
		if f, ok := tc.want.(float64); ok && math.Signbit(f) != math.Signbit(got.(float64)) {
			t.Errorf("%s: the sign of %v lost", tc.in, got)
		}
	}
}
