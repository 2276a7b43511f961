// Package bidi drives a headless Firefox over WebDriver BiDi, in the
// shape of internal/cdp (which drives Chromium), for the tests that look
// at sluice's dashboard as Firefox shows it: start the browser on
// loopback, open a page, evaluate JavaScript in it, list the errors it
// reported, take a screenshot. It shares internal/cdp's launcher and
// connection, over golang.org/x/net/websocket, with no other dependency.
//
//	b, err := bidi.Start(ctx, "")      // firefox-esr or firefox from $PATH
//	defer b.Close()                    // kills it by pid, removes its profile
//	p, err := b.NewPage(ctx, "http://127.0.0.1:8080/")
//	var title string
//	err = p.Evaluate(ctx, "document.title", &title)
//	png, err := p.Screenshot(ctx, false)
package bidi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/cdp"
)

// Names are the programs Find looks for, in order.
var Names = []string{"firefox-esr", "firefox"}

// EnvBrowser names an environment variable that, when set, is the
// browser Find returns.
const EnvBrowser = "SLUICE_FIREFOX"

// Find returns the path of a Firefox: $SLUICE_FIREFOX, or the first of
// Names on $PATH.
func Find() (string, error) {
	return cdp.FindProgram(EnvBrowser, Names, "Firefox", "Debian: apt-get install firefox-esr; make deps installs it")
}

// prefs are the profile's preferences, beside those the remote agent
// sets itself (remote.prefs.recommended): no first-run pages, no
// default-browser check, a pixel per CSS pixel, and scrollbars that
// take no room (as Chromium's --hide-scrollbars), so that a page is as
// wide as its viewport.
const prefs = `user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("browser.startup.page", 0);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);
user_pref("layout.css.devPixelsPerPx", "1.0");
user_pref("ui.useOverlayScrollbars", 1);
`

// Browser is a headless Firefox this package started, and its BiDi
// session. Its Process methods give its pid and stderr; Close kills it.
type Browser struct {
	*cdp.Process
	conn *cdp.Conn

	mu    sync.Mutex
	pages map[string]*Page // by browsing context id
}

// Start starts the headless Firefox at path (Find's when path is empty)
// with a new profile in a temporary directory and its WebDriver BiDi
// endpoint on a free loopback port, waits (bounded by ctx) until the
// endpoint listens, and opens a session that reports the pages' errors.
// The caller must Close it.
func Start(ctx context.Context, path string) (*Browser, error) {
	if path == "" {
		p, err := Find()
		if err != nil {
			return nil, err
		}
		path = p
	}
	dir, err := os.MkdirTemp("", "sluice-firefox-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "user.js"), []byte(prefs), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	proc, ws, err := cdp.Launch{
		Name: "firefox",
		Path: path,
		Args: []string{
			"--headless", "--no-remote", "--new-instance", "--profile", dir,
			"--remote-debugging-port=0", "--remote-allow-hosts=127.0.0.1", "--remote-allow-origins=" + cdp.Origin,
			"--window-size=1280,900", "about:blank",
		},
		// No crash reporter, and no fork into the background.
		Env:   []string{"MOZ_CRASHREPORTER_DISABLE=1", "MOZ_NO_REMOTE=1"},
		Dir:   dir,
		Ready: "WebDriver BiDi listening on ",
	}.Start(ctx)
	if err != nil {
		return nil, err
	}
	b := &Browser{Process: proc, pages: map[string]*Page{}}
	ws = strings.TrimSpace(ws)
	if !strings.HasPrefix(ws, "ws://") {
		b.Close()
		return nil, fmt.Errorf("firefox's BiDi address %q is no ws:// URL", ws)
	}
	b.conn, err = cdp.Dial(ctx, ws+"/session", b.event)
	if err != nil {
		b.Close()
		return nil, err
	}
	if err := b.conn.Call(ctx, "session.new", map[string]any{"capabilities": map[string]any{}}, nil); err != nil {
		b.Close()
		return nil, err
	}
	// The events that report the pages' errors (see Page.Errors).
	events := []string{"log.entryAdded", "network.responseCompleted", "network.fetchError"}
	if err := b.conn.Call(ctx, "session.subscribe", map[string]any{"events": events}, nil); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Close ends the session, kills the browser and its process group by
// pid, waits for it (at most 10 s), and removes its profile.
func (b *Browser) Close() {
	if b.conn != nil {
		_ = b.conn.Close()
	}
	b.Process.Close()
}

// call calls method with params on the browser's session and decodes
// its result into result (nil: ignored).
func (b *Browser) call(ctx context.Context, method string, params, result any) error {
	return b.conn.Call(ctx, method, params, result)
}

// NewPage opens a tab at pageURL (waiting until its document is
// complete).
func (b *Browser) NewPage(ctx context.Context, pageURL string) (*Page, error) {
	var res struct {
		Context string `json:"context"`
	}
	if err := b.call(ctx, "browsingContext.create", map[string]any{"type": "tab"}, &res); err != nil {
		return nil, fmt.Errorf("open a tab: %w", err)
	}
	p := &Page{b: b, id: res.Context}
	b.mu.Lock()
	b.pages[p.id] = p
	b.mu.Unlock()
	if err := p.Navigate(ctx, pageURL); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Page is a tab of a Browser: a top-level browsing context.
type Page struct {
	b  *Browser
	id string

	mu   sync.Mutex
	errs []string // the page's errors, at most maxErrors
}

// maxErrors bounds the errors a Page keeps.
const maxErrors = 100

// event keeps the error an event reports, if any, on its page.
func (b *Browser) event(method string, params json.RawMessage) {
	ctxID, text := errorText(method, params)
	if text == "" {
		return
	}
	b.mu.Lock()
	p := b.pages[ctxID]
	b.mu.Unlock()
	if p == nil {
		return
	}
	p.mu.Lock()
	if len(p.errs) < maxErrors {
		p.errs = append(p.errs, text)
	}
	p.mu.Unlock()
}

// errorText returns the browsing context of the event method with
// params and what it reports of an error, "" when it reports none.
func errorText(method string, params json.RawMessage) (ctxID, text string) {
	switch method {
	case "log.entryAdded":
		var e struct {
			Type   string `json:"type"`
			Level  string `json:"level"`
			Text   string `json:"text"`
			Method string `json:"method"`
			Source struct {
				Context string `json:"context"`
			} `json:"source"`
			Args       []json.RawMessage `json:"args"`
			StackTrace struct {
				CallFrames []struct {
					URL string `json:"url"`
				} `json:"callFrames"`
			} `json:"stackTrace"`
		}
		if json.Unmarshal(params, &e) != nil || e.Level != "error" {
			return "", ""
		}
		if e.Type == "console" && (e.Method == "error" || e.Method == "assert") {
			parts := []string{"console." + e.Method + ":"}
			for _, a := range e.Args {
				v, err := jsonValue(a)
				if err != nil {
					parts = append(parts, string(a))
					continue
				}
				j, _ := json.Marshal(v)
				parts = append(parts, string(j))
			}
			return e.Source.Context, strings.Join(parts, " ")
		}
		where := ""
		if f := e.StackTrace.CallFrames; len(f) > 0 {
			where = f[0].URL
		}
		// An uncaught exception, a Content-Security-Policy violation,
		// a script refused for its MIME type...
		return e.Source.Context, strings.TrimSpace(e.Text + " " + where)
	case "network.responseCompleted", "network.fetchError":
		var e struct {
			Context   string `json:"context"`
			ErrorText string `json:"errorText"`
			Request   struct {
				URL           string  `json:"url"`
				Destination   string  `json:"destination"`
				InitiatorType *string `json:"initiatorType"`
			} `json:"request"`
			Response struct {
				Status     int    `json:"status"`
				StatusText string `json:"statusText"`
			} `json:"response"`
		}
		if json.Unmarshal(params, &e) != nil {
			return "", ""
		}
		if e.Request.Destination == "image" && e.Request.InitiatorType == nil {
			// The browser's own request for the page's icon
			// (/favicon.ico unless the page names one), which Chromium
			// does not report either.
			return "", ""
		}
		if method == "network.fetchError" {
			// A request the page gave up itself (an AbortController,
			// a navigation away) is no error of the page's.
			if strings.Contains(e.ErrorText, "NS_BINDING_ABORTED") {
				return "", ""
			}
			return e.Context, fmt.Sprintf("failed to load %s: %s", e.Request.URL, e.ErrorText)
		}
		if e.Response.Status >= 400 {
			return e.Context, fmt.Sprintf("failed to load %s: the server responded with a status of %d %s", e.Request.URL, e.Response.Status, e.Response.StatusText)
		}
	}
	return "", ""
}

// Errors returns the errors the page reported since NewPage (the first
// 100): uncaught exceptions, console.error and console.assert calls, the
// browser's own error log entries, a resource that failed to load or
// was answered with a status of 400 or more.
func (p *Page) Errors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.errs)
}

// Navigate loads pageURL in the tab and waits (bounded by ctx) until its
// document is complete.
func (p *Page) Navigate(ctx context.Context, pageURL string) error {
	params := map[string]any{"context": p.id, "url": pageURL, "wait": "complete"}
	if err := p.b.call(ctx, "browsingContext.navigate", params, nil); err != nil {
		return fmt.Errorf("navigate to %s: %w", pageURL, err)
	}
	return p.WaitFor(ctx, `document.readyState === "complete"`)
}

// Evaluate evaluates the JavaScript expression expr in the page (a
// promise is awaited) and decodes its value, as JSON, into out (nil:
// ignored). A thrown exception is a *cdp.ExceptionError.
func (p *Page) Evaluate(ctx context.Context, expr string, out any) error {
	params := map[string]any{
		"expression":      expr,
		"target":          map[string]string{"context": p.id},
		"awaitPromise":    true,
		"resultOwnership": "none",
	}
	var res struct {
		Type             string          `json:"type"` // success or exception
		Result           json.RawMessage `json:"result"`
		ExceptionDetails struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := p.b.call(ctx, "script.evaluate", params, &res); err != nil {
		return err
	}
	if res.Type == "exception" {
		return &cdp.ExceptionError{Text: res.ExceptionDetails.Text}
	}
	if out == nil {
		return nil
	}
	v, err := jsonValue(res.Result)
	if err != nil {
		return err
	}
	if v == undefined {
		return fmt.Errorf("javascript: the expression has no JSON value (undefined)")
	}
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("javascript: %w", err)
	}
	return json.Unmarshal(j, out)
}

// WaitFor evaluates the boolean JavaScript expression cond every 100 ms
// until it is true, or ctx ends (the error then says what cond last was).
func (p *Page) WaitFor(ctx context.Context, cond string) error {
	return cdp.Poll(ctx, p.Evaluate, cond)
}

// SetViewport sets the page's size in CSS pixels, at a scale of 1.
func (p *Page) SetViewport(ctx context.Context, width, height int) error {
	return p.b.call(ctx, "browsingContext.setViewport", map[string]any{
		"context": p.id, "viewport": map[string]int{"width": width, "height": height}, "devicePixelRatio": 1,
	}, nil)
}

// Screenshot returns a PNG of the page's viewport or, when full, of the
// whole page.
func (p *Page) Screenshot(ctx context.Context, full bool) ([]byte, error) {
	origin := "viewport"
	if full {
		origin = "document"
	}
	var res struct {
		Data string `json:"data"`
	}
	params := map[string]any{"context": p.id, "origin": origin, "format": map[string]string{"type": "image/png"}}
	if err := p.b.call(ctx, "browsingContext.captureScreenshot", params, &res); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(res.Data)
}

// Close closes the tab.
func (p *Page) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.b.call(ctx, "browsingContext.close", map[string]string{"context": p.id}, nil)
	p.b.mu.Lock()
	delete(p.b.pages, p.id)
	p.b.mu.Unlock()
}
