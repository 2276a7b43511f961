//go:build e2e

package main

// The browsers the dashboard's end-to-end tests drive (go test -tags e2e):
// headless Chromium through chromedp, and headless Firefox ESR through
// puppeteer-core over WebDriver BiDi, which testdata/firefox.cjs runs in
// node. The tests install nothing: make deps installs the browsers and
// Node.js with apt-get, and the puppeteer-core that tools/node pins with
// npm ci; a missing one fails the test saying how to install it.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserPage is a browser tab as the dashboard's tests drive it.
type browserPage interface {
	// Navigate loads url and waits (bounded by ctx) until its document is
	// complete.
	Navigate(ctx context.Context, url string) error
	// Evaluate evaluates the JavaScript expression expr in the page (a
	// promise is awaited) and decodes its value, as JSON, into out (nil:
	// ignored).
	Evaluate(ctx context.Context, expr string, out any) error
	// SetViewport sets the page's size in CSS pixels, at a scale of 1.
	SetViewport(ctx context.Context, width, height int) error
	// Screenshot returns a PNG of the viewport or, when full, of the
	// whole page.
	Screenshot(ctx context.Context, full bool) ([]byte, error)
	// Errors returns the errors the page reported since it opened (the
	// first 100): uncaught exceptions, console.error and console.assert
	// calls, and the browser's own errors, such as a resource that failed
	// to load or a Content-Security-Policy violation.
	Errors() []string
	// Pid returns the process the test started for the page: the browser
	// itself, or the driver that started it.
	Pid() int
}

// dashboardBrowser is a browser the dashboard's tests drive.
type dashboardBrowser struct {
	name string
	find func() (string, error)
	// open starts the browser at path with a page at about:blank, closed
	// when t ends; output returns what the browser wrote (its first 64
	// KiB). ctx bounds the start.
	open func(ctx context.Context, t *testing.T, path string) (p browserPage, output func() string)
}

var (
	chromium = dashboardBrowser{"Chromium", findChromium, openChromium}
	firefox  = dashboardBrowser{"Firefox", findFirefox, openFirefox}
	// browsers are those the page must work in (the issue: current
	// Chromium and Firefox).
	browsers = []dashboardBrowser{chromium, firefox}
)

// findProgram returns the path of the first of names on $PATH; the error
// says what is missing and the apt-get line that installs it.
func findProgram(names []string, what, install string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s: none of %s is on $PATH; install it: %s (make deps does)",
		what, strings.Join(names, ", "), install)
}

func findChromium() (string, error) {
	return findProgram([]string{"chromium", "chromium-browser"}, "Chromium", "sudo apt-get install -y chromium")
}

func findFirefox() (string, error) {
	return findProgram([]string{"firefox-esr", "firefox"}, "Firefox", "sudo apt-get install -y firefox-esr")
}

// findBrowser returns br's path; a missing browser fails t (the e2e tier
// skips nothing).
func findBrowser(t *testing.T, br dashboardBrowser) string {
	t.Helper()
	path, err := br.find()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// cleanupMargin is how long before the test binary's deadline
// browserContext ends: time for a failing test's cleanups, which close the
// browser (10 s at most each), to run before go test's -timeout panics.
const cleanupMargin = 30 * time.Second

// browserContext returns the context a browser test waits under: it ends
// when t does, or cleanupMargin before the test binary's deadline (go test
// -timeout), so that a hang fails t saying what it waited for. It has no
// bound of its own: a browser starting on two cores starved of CPU takes
// tens of seconds (Firefox took 51 s beside make stress's CPU hog and
// other builds), and a fixed minute around the start and the page failed
// tests where nothing was wrong. A test waits for its condition; only a
// hang ends it.
func browserContext(t *testing.T) context.Context {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-cleanupMargin))
		t.Cleanup(cancel)
	}
	return ctx
}

// waitFor evaluates the boolean JavaScript expression cond in p every
// 100 ms until it is true, or ctx ends (the error then says what cond
// last was). It polls from here rather than with the drivers' own waits
// (chromedp.Poll, puppeteer's waitForFunction), which build the condition
// with new Function in the page: the dashboard's Content-Security-Policy
// forbids that, and bypassing it would hide its violations.
func waitFor(ctx context.Context, p browserPage, cond string) error {
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

// waitErrors waits (at most 20 s) until p reported n errors, and returns
// them.
func waitErrors(p browserPage, n int) []string {
	var errs []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if errs = p.Errors(); len(errs) >= n {
			break
		}
	}
	return errs
}

// errorLog keeps the errors a page reports, the first maxPageErrors.
type errorLog struct {
	mu   sync.Mutex
	errs []string
}

// maxPageErrors bounds the errors an errorLog keeps.
const maxPageErrors = 100

func (l *errorLog) add(text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < maxPageErrors {
		l.errs = append(l.errs, text)
	}
}

func (l *errorLog) Errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// outputBuffer keeps the first 64 KiB written to it, for errors.
type outputBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *outputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 64<<10 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *outputBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// chromiumPage is the tab of a headless Chromium that chromedp started.
type chromiumPage struct {
	tab context.Context // chromedp's context of the tab, which owns the browser
	pid int
	errorLog
}

// openChromium starts the headless Chromium at path with chromedp, on a
// fresh profile in a temporary directory (chromedp's, removed with the
// browser), talking to it over a pipe: no port is opened.
func openChromium(ctx context.Context, t *testing.T, path string) (browserPage, func() string) {
	t.Helper()
	out := new(outputBuffer)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("force-device-scale-factor", "1"),
		chromedp.CombinedOutput(out),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses its sandbox as root
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelTab() // kills the browser, and waits for it
		cancelAlloc()
	})
	// The first action starts the browser, which lives as long as the
	// context it runs in: tab's, with ctx bounding the start alone.
	stop := context.AfterFunc(ctx, cancelTab)
	err := chromedp.Do(tab)
	stop()
	if err != nil {
		t.Fatalf("start %s: %v\n%s", path, err, out)
	}
	p := &chromiumPage{tab: tab, pid: chromedp.FromContext(tab).Browser.Process().Pid}
	messages := chromedp.Console(tab) // subscribed now; read below until the tab ends
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleException, "assert":
				p.add(strings.TrimSpace(m.String() + " " + m.URL))
			}
		}
	}()
	return p, out.String
}

// runOn runs a on tab, bounded by ctx too.
func runOn[T any](ctx, tab context.Context, a chromedp.Action[T]) (T, error) {
	c, cancel := context.WithCancel(tab)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	v, err := chromedp.Run(c, a)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return v, err
}

func (p *chromiumPage) Pid() int { return p.pid }

func (p *chromiumPage) Navigate(ctx context.Context, url string) error {
	if _, err := runOn(ctx, p.tab, chromedp.Navigate(url)); err != nil {
		return fmt.Errorf("navigate to %s: %w", url, err)
	}
	return waitFor(ctx, p, `document.readyState === "complete"`)
}

func (p *chromiumPage) Evaluate(ctx context.Context, expr string, out any) error {
	raw, err := runOn(ctx, p.tab, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil || out == nil {
		return err
	}
	if len(raw) == 0 {
		return errors.New("javascript: the expression has no JSON value (undefined)")
	}
	return json.Unmarshal(raw, out)
}

func (p *chromiumPage) SetViewport(ctx context.Context, width, height int) error {
	_, err := runOn(ctx, p.tab, chromedp.EmulateViewport(int64(width), int64(height)))
	return err
}

func (p *chromiumPage) Screenshot(ctx context.Context, full bool) ([]byte, error) {
	if full {
		return runOn(ctx, p.tab, chromedp.FullScreenshot(100)) // 100: PNG
	}
	return runOn(ctx, p.tab, chromedp.CaptureScreenshot())
}

// nodeProject is the npm project, relative to the repository's root,
// that pins the Node.js packages the Firefox tests run (puppeteer-core);
// make deps installs its node_modules with npm ci.
const nodeProject = "tools/node"

// nodeModules returns the directory of nodeProject, whose node_modules
// holds the puppeteer-core its package.json pins. It installs nothing: a
// node_modules that is missing, or holds another version, fails t naming
// make deps.
func nodeModules(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := wd
	for {
		if _, err := os.Stat(filepath.Join(dir, nodeProject, "package.json")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no %s/package.json in %s or a directory above it", nodeProject, wd)
		}
		dir = parent
	}
	dir = filepath.Join(dir, nodeProject)
	var project struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	var installed struct {
		Version string `json:"version"`
	}
	if err := readJSON(filepath.Join(dir, "package.json"), &project); err != nil {
		t.Fatal(err)
	}
	want := project.Dependencies["puppeteer-core"]
	err = readJSON(filepath.Join(dir, "node_modules", "puppeteer-core", "package.json"), &installed)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		t.Fatalf("puppeteer-core is not installed in %s/node_modules: run make deps (npm ci --prefix %s)", dir, nodeProject)
	case err != nil:
		t.Fatal(err)
	case installed.Version != want:
		t.Fatalf("%s/node_modules holds puppeteer-core %s, its package.json pins %s: run make deps (npm ci --prefix %s)",
			dir, installed.Version, want, nodeProject)
	}
	return dir
}

// readJSON decodes the JSON file at path into v.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// firefoxPage is the page of a headless Firefox that testdata/firefox.cjs
// drives with puppeteer-core, in node.
type firefoxPage struct {
	gone chan struct{} // closed when the driver's replies end
	pid  int           // the driver's

	mu      sync.Mutex
	stdin   io.WriteCloser
	next    int
	pending map[int]chan firefoxReply
	errorLog
}

// firefoxReply is a line firefox.cjs writes on fd 3.
type firefoxReply struct {
	ID        int             `json:"id"`
	Value     json.RawMessage `json:"value"`
	Undefined bool            `json:"undefined"`
	Error     string          `json:"error"`
	Ready     int             `json:"ready"` // Firefox's pid, once the page is open
	PageError string          `json:"pageError"`
}

// openFirefox starts the headless Firefox at path under puppeteer-core
// (from nodeModules), on a fresh profile in a temporary
// directory (puppeteer's, removed with the browser). When t ends it
// closes the driver's stdin, on which the driver closes Firefox and exits
// (as it does when the test binary dies); one still running 10 s later is
// killed by pid, and Firefox's process group with it.
func openFirefox(ctx context.Context, t *testing.T, path string) (browserPage, func() string) {
	t.Helper()
	modules := nodeModules(t)
	node, err := findProgram([]string{"node", "nodejs"}, "Node.js (Firefox's tests run puppeteer-core in it)", "sudo apt-get install -y nodejs npm")
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "firefox.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	replies, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := new(outputBuffer)
	cmd := exec.Command(node, script, modules, path)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{w} // fd 3
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", node, err)
	}
	w.Close()
	p := &firefoxPage{gone: make(chan struct{}), pid: cmd.Process.Pid, stdin: stdin, pending: map[int]chan firefoxReply{}}
	ready := make(chan int, 1)
	go p.read(replies, ready)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	var pid int // Firefox's
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			if pid > 0 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
			<-exited
		}
	})
	select {
	case pid = <-ready:
	case <-p.gone:
		<-exited
		t.Fatalf("the Firefox driver exited before its page was open: %s\n%s", cmd.ProcessState, out)
	case <-ctx.Done():
		t.Fatalf("Firefox did not start: %v\n%s", ctx.Err(), out)
	}
	return p, out.String
}

// read reads the driver's replies until they end.
func (p *firefoxPage) read(r io.ReadCloser, ready chan<- int) {
	defer close(p.gone)
	defer r.Close()
	dec := json.NewDecoder(r)
	for {
		var m firefoxReply
		if err := dec.Decode(&m); err != nil {
			return
		}
		switch {
		case m.PageError != "":
			p.add(m.PageError)
		case m.Ready != 0:
			ready <- m.Ready
		default:
			p.mu.Lock()
			ch := p.pending[m.ID]
			delete(p.pending, m.ID)
			p.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
}

// call sends the request req (an "op" and its fields) and waits (bounded
// by ctx) for its reply.
func (p *firefoxPage) call(ctx context.Context, req map[string]any) (firefoxReply, error) {
	ch := make(chan firefoxReply, 1)
	p.mu.Lock()
	p.next++
	id := p.next
	req["id"] = id
	line, err := json.Marshal(req)
	if err == nil {
		p.pending[id] = ch
		_, err = p.stdin.Write(append(line, '\n'))
	}
	p.mu.Unlock()
	if err != nil {
		return firefoxReply{}, fmt.Errorf("firefox %s: %w", req["op"], err)
	}
	var m firefoxReply
	select {
	case m = <-ch:
	case <-p.gone:
		select {
		case m = <-ch:
		default:
			return m, fmt.Errorf("firefox %s: the driver exited", req["op"])
		}
	case <-ctx.Done():
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
		return m, fmt.Errorf("firefox %s: %w", req["op"], ctx.Err())
	}
	if m.Error != "" {
		return m, fmt.Errorf("firefox %s: %s", req["op"], m.Error)
	}
	return m, nil
}

func (p *firefoxPage) Pid() int { return p.pid }

func (p *firefoxPage) Navigate(ctx context.Context, url string) error {
	if _, err := p.call(ctx, map[string]any{"op": "navigate", "url": url}); err != nil {
		return err
	}
	return waitFor(ctx, p, `document.readyState === "complete"`)
}

func (p *firefoxPage) Evaluate(ctx context.Context, expr string, out any) error {
	m, err := p.call(ctx, map[string]any{"op": "evaluate", "expr": expr})
	if err != nil || out == nil {
		return err
	}
	if m.Undefined {
		return errors.New("javascript: the expression has no JSON value (undefined)")
	}
	return json.Unmarshal(m.Value, out)
}

func (p *firefoxPage) SetViewport(ctx context.Context, width, height int) error {
	_, err := p.call(ctx, map[string]any{"op": "viewport", "width": width, "height": height})
	return err
}

func (p *firefoxPage) Screenshot(ctx context.Context, full bool) ([]byte, error) {
	m, err := p.call(ctx, map[string]any{"op": "screenshot", "full": full})
	if err != nil {
		return nil, err
	}
	var data string
	if err := json.Unmarshal(m.Value, &data); err != nil {
		return nil, fmt.Errorf("firefox screenshot: %w", err)
	}
	return base64.StdEncoding.DecodeString(data)
}
