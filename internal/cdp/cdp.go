// Package cdp drives a headless Chromium over the Chrome DevTools
// Protocol, for the tests that look at sluice's dashboard as a browser
// shows it: start the browser on loopback, open a page, evaluate
// JavaScript in it, list the errors it reported, take a screenshot. It speaks the few JSON messages it
// needs over golang.org/x/net/websocket, with no other dependency.
//
//	b, err := cdp.Start(ctx, "")       // chromium from $PATH
//	defer b.Close()                    // kills it by pid, removes its profile
//	p, err := b.NewPage(ctx, "http://127.0.0.1:8080/")
//	var title string
//	err = p.Evaluate(ctx, "document.title", &title)
//	png, err := p.Screenshot(ctx)
package cdp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/websocket"
)

// Names are the programs Find looks for, in order.
var Names = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// EnvBrowser names an environment variable that, when set, is the
// browser Find returns.
const EnvBrowser = "SLUICE_CHROMIUM"

// Find returns the path of a Chromium: $SLUICE_CHROMIUM, or the first of
// Names on $PATH.
func Find() (string, error) {
	if p := os.Getenv(EnvBrowser); p != "" {
		return exec.LookPath(p)
	}
	for _, n := range Names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium found: none of %s is on $PATH and $%s is not set (Debian: apt-get install chromium; make deps installs it)", strings.Join(Names, ", "), EnvBrowser)
}

// origin is the Origin the WebSocket handshakes send, which the browser
// is told to allow (--remote-allow-origins).
const origin = "http://127.0.0.1"

// Browser is a headless Chromium this package started.
type Browser struct {
	cmd  *exec.Cmd
	dir  string // the profile directory
	base string // http://127.0.0.1:<port> of its DevTools endpoint
	done chan struct{}

	mu     sync.Mutex
	stderr bytes.Buffer // the first 64 KiB of its stderr, for errors
}

// maxStderr bounds what a Browser keeps of the browser's stderr.
const maxStderr = 64 << 10

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
		"--remote-allow-origins=" + origin, "--user-data-dir=" + dir,
		"--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-breakpad", "--metrics-recording-only", "--mute-audio",
		"--password-store=basic", "--use-mock-keychain", "--hide-scrollbars",
		"--window-size=1280,900", "--force-device-scale-factor=1",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox") // Chromium refuses to run its sandbox as root
	}
	cmd := exec.Command(path, append(args, "about:blank")...)
	ownGroup(cmd)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	b := &Browser{cmd: cmd, dir: dir, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "DevTools listening on "); ok {
				select {
				case listening <- rest:
				default:
				}
			}
			b.mu.Lock()
			if b.stderr.Len() < maxStderr {
				b.stderr.WriteString(line + "\n")
			}
			b.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pipe)
		_ = cmd.Wait()
		close(b.done)
	}()
	select {
	case ws := <-listening:
		u, err := url.Parse(ws)
		if err != nil || u.Host == "" {
			b.Close()
			return nil, fmt.Errorf("chromium's DevTools address %q: %v", ws, err)
		}
		b.base = "http://" + u.Host
		return b, nil
	case <-b.done:
		return nil, fmt.Errorf("chromium exited before its DevTools endpoint listened: %s\n%s", cmd.ProcessState, b.Stderr())
	case <-ctx.Done():
		b.Close()
		return nil, fmt.Errorf("chromium's DevTools endpoint did not listen: %w\n%s", ctx.Err(), b.Stderr())
	}
}

// Pid returns the browser's process id (which is its process group's).
func (b *Browser) Pid() int { return b.cmd.Process.Pid }

// Stderr returns what the browser wrote to stderr (its first 64 KiB).
func (b *Browser) Stderr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stderr.String()
}

// Close kills the browser, its process group and so its helper
// processes, by pid, waits for it (at most 10 s), and removes its profile.
func (b *Browser) Close() {
	killGroup(b.cmd)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
	}
	os.RemoveAll(b.dir)
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
	cfg, err := websocket.NewConfig(t.WS, origin)
	if err != nil {
		return nil, err
	}
	conn, err := cfg.DialContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to the tab: %w", err)
	}
	p := &Page{b: b, id: t.ID, conn: conn, pending: map[int64]chan reply{}, closed: make(chan struct{})}
	go p.read()
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
	conn *websocket.Conn
	next atomic.Int64

	mu      sync.Mutex
	pending map[int64]chan reply
	err     error    // why read stopped
	errs    []string // the page's errors, at most maxErrors
	closed  chan struct{}
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

// reply is the answer to one call.
type reply struct {
	ID     int64           `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    string `json:"data"`
	} `json:"error"`
}

// read hands each reply to its caller, and keeps the errors that events
// report, until the connection ends.
func (p *Page) read() {
	for {
		var msg []byte
		if err := websocket.Message.Receive(p.conn, &msg); err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			close(p.closed)
			return
		}
		var r reply
		if json.Unmarshal(msg, &r) != nil {
			continue
		}
		if r.ID == 0 { // an event
			var e event
			if json.Unmarshal(msg, &e) == nil {
				if text := e.errorText(); text != "" {
					p.mu.Lock()
					if len(p.errs) < maxErrors {
						p.errs = append(p.errs, text)
					}
					p.mu.Unlock()
				}
			}
			continue
		}
		p.mu.Lock()
		c := p.pending[r.ID]
		delete(p.pending, r.ID)
		p.mu.Unlock()
		if c != nil {
			c <- r
		}
	}
}

// Call calls method with params and decodes its result into result (nil:
// ignored).
func (p *Page) Call(ctx context.Context, method string, params, result any) error {
	id := p.next.Add(1)
	c := make(chan reply, 1)
	p.mu.Lock()
	p.pending[id] = c
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
	}()
	if params == nil {
		params = struct{}{}
	}
	msg, err := json.Marshal(struct {
		ID     int64  `json:"id"`
		Method string `json:"method"`
		Params any    `json:"params"`
	}{id, method, params})
	if err != nil {
		return err
	}
	if err := websocket.Message.Send(p.conn, string(msg)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r := <-c:
		if r.Error != nil {
			return fmt.Errorf("%s: %s (%d) %s", method, r.Error.Message, r.Error.Code, r.Error.Data)
		}
		if result != nil {
			if err := json.Unmarshal(r.Result, result); err != nil {
				return fmt.Errorf("%s: %w", method, err)
			}
		}
		return nil
	case <-p.closed:
		p.mu.Lock()
		defer p.mu.Unlock()
		return fmt.Errorf("%s: the connection to the tab ended: %w", method, p.err)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
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
// expression.
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
	var last error
	for {
		var ok bool
		err := p.Evaluate(ctx, "Boolean("+cond+")", &ok)
		if err == nil && ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last: %v)", cond, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w (still false)", cond, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
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
