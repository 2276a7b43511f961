// Package cdp drives a headless Chromium over the Chrome DevTools
// Protocol, for the tests that look at sluice's dashboard as a browser
// shows it: start the browser on loopback, open a page, evaluate
// JavaScript in it, list the errors it reported, take a screenshot. It
// speaks the few JSON messages it needs over golang.org/x/net/websocket,
// with no other dependency. Its launcher (Launch, Process), its
// connection (Conn), Poll and ExceptionError are internal/bidi's too,
// which drives Firefox over WebDriver BiDi in the same shape.
//
//	b, err := cdp.Start(ctx, "")       // chromium from $PATH
//	defer b.Close()                    // kills it by pid, removes its profile
//	p, err := b.NewPage(ctx, "http://127.0.0.1:8080/")
//	var title string
//	err = p.Evaluate(ctx, "document.title", &title)
//	png, err := p.Screenshot(ctx, false)
package cdp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Names are the programs Find looks for, in order.
var Names = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// EnvBrowser names an environment variable that, when set, is the
// browser Find returns.
const EnvBrowser = "SLUICE_CHROMIUM"

// Find returns the path of a Chromium: $SLUICE_CHROMIUM, or the first of
// Names on $PATH.
func Find() (string, error) {
	return FindProgram(EnvBrowser, Names, "Chromium", "Debian: apt-get install chromium; make deps installs it")
}

// Browser is a headless Chromium this package started. Its Process
// methods give its pid and stderr, and Close it.
type Browser struct {
	*Process
	base string // http://127.0.0.1:<port> of its DevTools endpoint
}

// Start starts the headless Chromium at path (Find's when path is
// empty) with a new profile in a temporary directory, its DevTools
// endpoint on a free loopback port, and a window of 1280×900, and waits
// (bounded by ctx) until the endpoint listens. The caller must Close it.
func Start(ctx context.Context, path string) (*Browser, error) {
	if path == "" {
		p, err := Find()
		if err != nil {
			return nil, err
		}
		path = p
	}
	dir, err := os.MkdirTemp("", "sluice-chromium-")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--headless=new", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--remote-allow-origins=" + Origin, "--user-data-dir=" + dir,
		"--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-breakpad", "--metrics-recording-only", "--mute-audio",
		"--password-store=basic", "--use-mock-keychain", "--hide-scrollbars",
		"--window-size=1280,900", "--force-device-scale-factor=1",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox") // Chromium refuses to run its sandbox as root
	}
	proc, ws, err := Launch{Name: "chromium", Path: path, Args: append(args, "about:blank"), Dir: dir, Ready: "DevTools listening on "}.Start(ctx)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(ws)
	if err != nil || u.Host == "" {
		proc.Close()
		return nil, fmt.Errorf("chromium's DevTools address %q: %v", ws, err)
	}
	return &Browser{Process: proc, base: "http://" + u.Host}, nil
}

// target is a DevTools target as /json/new describes it.
type target struct {
	ID  string `json:"id"`
	WS  string `json:"webSocketDebuggerUrl"`
	Typ string `json:"type"`
}

// NewPage opens a tab at pageURL and connects to it.
func (b *Browser) NewPage(ctx context.Context, pageURL string) (*Page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, b.base+"/json/new?"+url.QueryEscape(pageURL), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("open a tab: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("open a tab: %s: %s", resp.Status, body)
	}
	var t target
	if err := json.Unmarshal(body, &t); err != nil || t.WS == "" {
		return nil, fmt.Errorf("open a tab: %q is no target (%v)", body, err)
	}
	p := &Page{b: b, id: t.ID}
	conn, err := Dial(ctx, t.WS, p.event)
	if err != nil {
		return nil, fmt.Errorf("connect to the tab: %w", err)
	}
	p.conn = conn
	// The events that report the page's errors (see Errors).
	for _, domain := range []string{"Runtime", "Log"} {
		if err := p.Call(ctx, domain+".enable", nil, nil); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Page is a tab of a Browser.
type Page struct {
	b    *Browser
	id   string
	conn *Conn

	mu   sync.Mutex
	errs []string // the page's errors, at most maxErrors
}

// maxErrors bounds the errors a Page keeps.
const maxErrors = 100

// event is a message of the browser's own, not a reply: the few fields
// of the events that report errors.
type event struct {
	Method string `json:"method"`
	Params struct {
		// Runtime.exceptionThrown
		ExceptionDetails struct {
			Text      string `json:"text"`
			URL       string `json:"url"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
		// Runtime.consoleAPICalled
		Type string `json:"type"`
		Args []struct {
			Value       json.RawMessage `json:"value"`
			Description string          `json:"description"`
		} `json:"args"`
		// Log.entryAdded
		Entry struct {
			Level string `json:"level"`
			Text  string `json:"text"`
			URL   string `json:"url"`
		} `json:"entry"`
	} `json:"params"`
}

// errorText returns what e reports of an error of the page, "" when it
// reports none.
func (e *event) errorText() string {
	switch p := &e.Params; e.Method {
	case "Runtime.exceptionThrown":
		d := p.ExceptionDetails
		return strings.TrimSpace("uncaught " + d.Text + " " + d.Exception.Description + " " + d.URL)
	case "Runtime.consoleAPICalled":
		if p.Type != "error" && p.Type != "assert" {
			return ""
		}
		parts := []string{"console." + p.Type + ":"}
		for _, a := range p.Args {
			if len(a.Value) > 0 {
				parts = append(parts, string(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		return strings.Join(parts, " ")
	case "Log.entryAdded":
		if p.Entry.Level != "error" {
			return ""
		}
		return strings.TrimSpace(p.Entry.Text + " " + p.Entry.URL)
	}
	return ""
}

// Errors returns the errors the page reported since NewPage (the first
// 100): uncaught exceptions, console.error and console.assert calls, and
// the browser's own error log entries, such as a resource that failed to
// load or a Content-Security-Policy violation.
func (p *Page) Errors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.errs)
}

// event keeps the error an event of the page reports, if any.
func (p *Page) event(method string, params json.RawMessage) {
	e := event{Method: method}
	if json.Unmarshal(params, &e.Params) != nil {
		return
	}
	if text := e.errorText(); text != "" {
		p.mu.Lock()
		if len(p.errs) < maxErrors {
			p.errs = append(p.errs, text)
		}
		p.mu.Unlock()
	}
}

// Call calls method with params and decodes its result into result (nil:
// ignored).
func (p *Page) Call(ctx context.Context, method string, params, result any) error {
	return p.conn.Call(ctx, method, params, result)
}

// Navigate loads pageURL in the tab and waits (bounded by ctx) until its
// document is complete.
func (p *Page) Navigate(ctx context.Context, pageURL string) error {
	var res struct {
		ErrorText string `json:"errorText"`
	}
	if err := p.Call(ctx, "Page.navigate", map[string]string{"url": pageURL}, &res); err != nil {
		return err
	}
	if res.ErrorText != "" {
		return fmt.Errorf("navigate to %s: %s", pageURL, res.ErrorText)
	}
	return p.WaitFor(ctx, `document.readyState === "complete"`)
}

// ExceptionError is a JavaScript exception thrown by Evaluate's
// expression (internal/bidi's too).
type ExceptionError struct {
	// Text describes it, as the console would.
	Text string
}

func (e *ExceptionError) Error() string { return "javascript: " + e.Text }

// Evaluate evaluates the JavaScript expression expr in the page (a
// promise is awaited) and decodes its value, as JSON, into out (nil:
// ignored). A thrown exception is an *ExceptionError.
func (p *Page) Evaluate(ctx context.Context, expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	params := map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}
	if err := p.Call(ctx, "Runtime.evaluate", params, &res); err != nil {
		return err
	}
	if e := res.Exception; e != nil {
		return &ExceptionError{Text: strings.TrimSpace(e.Text + " " + e.Exception.Description)}
	}
	if out == nil {
		return nil
	}
	if len(res.Result.Value) == 0 {
		return errors.New("javascript: the expression has no JSON value (undefined)")
	}
	return json.Unmarshal(res.Result.Value, out)
}

// WaitFor evaluates the boolean JavaScript expression cond every 100 ms
// until it is true, or ctx ends (the error then says what cond last was).
func (p *Page) WaitFor(ctx context.Context, cond string) error {
	return Poll(ctx, p.Evaluate, cond)
}

// SetViewport sets the page's size in CSS pixels, at a scale of 1.
func (p *Page) SetViewport(ctx context.Context, width, height int) error {
	return p.Call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
}

// Screenshot returns a PNG of the page's viewport or, when full, of the
// whole page.
func (p *Page) Screenshot(ctx context.Context, full bool) ([]byte, error) {
	params := map[string]any{"format": "png"}
	if full {
		var m struct {
			Content struct {
				Width  float64 `json:"width"`
				Height float64 `json:"height"`
			} `json:"cssContentSize"`
		}
		if err := p.Call(ctx, "Page.getLayoutMetrics", nil, &m); err != nil {
			return nil, err
		}
		params["captureBeyondViewport"] = true
		params["clip"] = map[string]any{"x": 0, "y": 0, "width": m.Content.Width, "height": m.Content.Height, "scale": 1}
	}
	var res struct {
		Data string `json:"data"`
	}
	if err := p.Call(ctx, "Page.captureScreenshot", params, &res); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(res.Data)
}

// Close closes the connection to the tab, and the tab.
func (p *Page) Close() {
	_ = p.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.b.base+"/json/close/"+url.PathEscape(p.id), nil); err == nil {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}
