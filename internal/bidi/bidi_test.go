package bidi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/cdp"
	"github.com/sluice-go/sluice/internal/cdp/pagetest"
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
	b, err := Start(pagetest.Context(t), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestBiDiPage: the page check both drivers pass (pagetest.Run), then
// what BiDi reports its own way: an uncaught exception as an Error,
// undefined as no value, and the errors of each tab its own: an inline
// script its Content-Security-Policy refuses, a script and an image that
// are not found; not /favicon.ico, which the browser asks for itself.
func TestBiDiPage(t *testing.T) {
	b := start(t)
	p := pagetest.Run(t, func(ctx context.Context, url string) (pagetest.Page, error) { return b.NewPage(ctx, url) })
	if all := strings.Join(p.Errors(), "\n"); !strings.Contains(all, "Error: boom-1") {
		t.Errorf("errors %q, want the uncaught Error: boom-1", p.Errors())
	}
	ctx := pagetest.Context(t)
	var v int
	if err := p.Evaluate(ctx, `undefined`, &v); err == nil || !strings.Contains(err.Error(), "undefined") {
		t.Errorf("undefined into an int: %v, want an error saying undefined", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/csp" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		fmt.Fprint(w, `<!doctype html><title>csp</title><script>document.title = "ran"</script><script src="/missing.js"></script><img src="/missing.png">`)
	}))
	defer srv.Close()
	q, err := b.NewPage(ctx, srv.URL+"/csp")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var title string
	if err := q.Evaluate(ctx, "document.title", &title); err != nil || title != "csp" {
		t.Errorf("title %q %v, want csp: the policy refuses the inline script", title, err)
	}
	errs := pagetest.WaitErrors(q, 3)
	all := strings.Join(errs, "\n")
	if !strings.Contains(all, "Content-Security-Policy") || !strings.Contains(all, "/missing.js") || !strings.Contains(all, "/missing.png") || strings.Contains(all, "favicon") {
		t.Errorf("errors %q, want the refused inline script, the missing script and the missing image (and not the icon the browser looked for)", errs)
	}
	if n := len(p.Errors()); n != 2 {
		t.Errorf("the first tab has %d errors after the second's, want its 2: %q", n, p.Errors())
	}
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
