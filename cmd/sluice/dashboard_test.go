//go:build e2e

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/bidi"
	"github.com/sluice-go/sluice/internal/cdp"
	"github.com/sluice-go/sluice/internal/cdp/pagetest"
	"github.com/sluice-go/sluice/internal/service/admin"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
)

// screenshotPath is the committed screenshot of the dashboard that the
// README shows: TestDashboard writes it when SLUICE_UPDATE_SCREENSHOT=1
// (go test -run TestDashboard$ ./cmd/sluice/), else to a temporary
// directory, so that tests leave the tree as it was.
const screenshotPath = "../../docs/dashboard.png"

const dashboardRules = `
rules:
  - {name: login, match: POST /login, key: ip, algorithm: sliding_window, limit: 20, period: 1m}
  - {name: search, match: GET /search, key: header:X-Api-Key, limit: 50, period: 1s, burst: 100}
  - {name: export, match: GET /export, key: header:X-Api-Key, algorithm: gcra, limit: 2, period: 1s, shadow: true}
`

// dashboardView is what the test reads off the page's DOM.
type dashboardView struct {
	Rules        []string `json:"rules"`
	Limits       []string `json:"limits"`
	LoginAllowed float64  `json:"loginAllowed"`
	LoginDenied  float64  `json:"loginDenied"`
	SearchDenied float64  `json:"searchDenied"`
	ExportShadow float64  `json:"exportShadow"`
	Top          []struct {
		Rule   string  `json:"rule"`
		Key    string  `json:"key"`
		Denied float64 `json:"denied"`
	} `json:"top"`
	Lines   int      `json:"lines"`
	Breaker string   `json:"breaker"`
	P99     string   `json:"p99"`
	Text    string   `json:"text"`
	Reloads []string `json:"reloads"`
	Login   bool     `json:"login"` // the token's form is shown
}

// readView is the JavaScript that reads a dashboardView.
const readView = `(() => {
  const rows = [...document.querySelectorAll("#rules tbody tr")];
  const row = (n) => rows.find((r) => r.dataset.rule === n);
  const num = (tr, f) => {
    const c = tr && tr.querySelector('[data-field="' + f + '"]');
    return c ? Number(c.textContent.replace(/,/g, "")) : -1;
  };
  return {
    rules: rows.map((r) => r.dataset.rule),
    limits: rows.map((r) => r.cells[3].textContent),
    loginAllowed: num(row("login"), "allowed"),
    loginDenied: num(row("login"), "denied"),
    searchDenied: num(row("search"), "denied"),
    exportShadow: num(row("export"), "shadow_denied"),
    top: [...document.querySelectorAll("#top tbody tr")].map((r) => ({rule: r.dataset.rule, key: r.dataset.key, denied: num(r, "denied")})),
    lines: document.querySelectorAll("#charts polyline").length,
    breaker: document.getElementById("breaker").textContent,
    p99: document.getElementById("p99").textContent,
    text: document.body.innerText,
    reloads: [...document.querySelectorAll("#reloads li")].map((li) => li.textContent),
    login: document.getElementById("login").getClientRects().length > 0,
  };
})()`

// dashboardBrowser is a browser the dashboard's tests drive.
type dashboardBrowser struct {
	name string
	find func() (string, error)
	// open starts the browser at path and opens a blank page in it, both
	// closed when t ends; stderr returns what the browser wrote there.
	open func(ctx context.Context, t *testing.T, path string) (page pagetest.Page, stderr func() string)
}

var (
	chromium = dashboardBrowser{"Chromium", cdp.Find, opener(cdp.Start)}
	firefox  = dashboardBrowser{"Firefox", bidi.Find, opener(bidi.Start)}
	// browsers are those the page must work in (the issue: current
	// Chromium and Firefox).
	browsers = []dashboardBrowser{chromium, firefox}
)

// opener returns the open of a dashboardBrowser started by start.
func opener[B interface {
	NewPage(context.Context, string) (P, error)
	Stderr() string
	Close()
}, P pagetest.Page](start func(context.Context, string) (B, error)) func(context.Context, *testing.T, string) (pagetest.Page, func() string) {
	return func(ctx context.Context, t *testing.T, path string) (pagetest.Page, func() string) {
		t.Helper()
		b, err := start(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		page, err := b.NewPage(ctx, "about:blank")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(page.Close)
		return page, b.Stderr
	}
}

// findBrowser returns br's path. It skips t under -short; outside
// -short a missing browser fails it: make deps installs it.
func findBrowser(t *testing.T, br dashboardBrowser) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("drives %s; skipped under -short", br.name)
	}
	path, err := br.find()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDashboard: sluice serve's dashboard, in headless Chromium, shows
// the rules, a limited rule's allowed and denied decisions, and the
// limited key, masked, while a key under its limit is not listed.
// With SLUICE_UPDATE_SCREENSHOT=1 it runs longer and writes the README's
// screenshot.
func TestDashboard(t *testing.T) {
	update := os.Getenv("SLUICE_UPDATE_SCREENSHOT") == "1"
	run := 6 * time.Second
	if update {
		run = 40 * time.Second // a chart with more to show
	}
	testDashboard(t, chromium, run, update)
}

// TestDashboardFirefox: the same page, in headless Firefox, shows the
// same, and reports no error either.
func TestDashboardFirefox(t *testing.T) {
	testDashboard(t, firefox, 3*time.Second, false)
}

// testDashboard runs TestDashboard's scenario in br: sluice serve on a
// real redis-server, a reload rejected and one applied, run of traffic
// that gets a login client limited, then the page's DOM read and
// checked, and a screenshot taken (written to screenshotPath when
// update).
func testDashboard(t *testing.T, br dashboardBrowser, run time.Duration, update bool) {
	browserPath := findBrowser(t, br)
	srv := redistest.Start(t)
	cfg := writeFile(t, dashboardRules)
	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}, "--config", cfg, "--reload-interval", "200ms")
	// A reload rejected, then one applied: the page lists both.
	rewrite := func(content string) {
		if err := os.WriteFile(cfg, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(strings.Replace(dashboardRules, "period: 1m", "perod: 1m", 1))
	d.waitLog(t, "config rejected")
	rewrite(dashboardRules + "# reviewed\n")
	d.waitLog(t, "config reloaded")

	// The browser first: it takes tens of seconds to start on a starved
	// machine, which the traffic's minute below is not for.
	ctx := pagetest.Context(t)
	page, stderr := br.open(ctx, t, browserPath)
	if err := page.SetViewport(ctx, 1280, 860); err != nil {
		t.Fatal(err)
	}

	const limited, unlimited = "203.0.113.7", "198.51.100.23"
	// Traffic, every 100ms for at most a minute, until the screenshot is
	// taken: one login client over its limit of 20/min, another under
	// it, search under its limit, export over its shadow limit.
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	traffic.Add(1)
	go func() {
		defer traffic.Done()
		c := &http.Client{Timeout: 5 * time.Second}
		check := func(body string) {
			if resp, err := c.Post(d.base+"/v1/check", "application/json", strings.NewReader(body)); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 600; i++ {
			check(`{"rule":"login","key":"` + limited + `"}`)
			if i%10 == 0 && i < 60 {
				check(`{"rule":"login","key":"` + unlimited + `"}`)
			}
			for range 1 + i%5 + 2*(i/50%2) { // 30/s, then 50/s, by turns
				check(`{"rule":"search","key":"key-a"}`)
			}
			check(`{"rule":"export","key":"key-b"}`)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	stopTraffic := sync.OnceFunc(func() { close(stop); traffic.Wait() })
	t.Cleanup(stopTraffic)

	if err := page.Navigate(ctx, d.base+"/"); err != nil {
		t.Fatal(err)
	}
	mask := policy.MaskKey(limited)
	// Until the page shows the limited key, after run of traffic for the
	// chart (bounded by ctx: the test's deadline).
	started := time.Now()
	var v dashboardView
	for {
		if err := page.Evaluate(ctx, readView, &v); err != nil {
			t.Fatalf("reading the page: %v\n%s", err, stderr())
		}
		shown := v.LoginAllowed > 0 && v.LoginDenied > 0 && v.ExportShadow > 0 && len(v.Top) > 0 && v.P99 != "–" && len(v.Reloads) == 2
		if shown && time.Since(started) > run {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the page did not show the limited rule and key in %v: %+v", time.Since(started).Round(time.Second), v)
		case <-time.After(250 * time.Millisecond):
		}
	}
	shot, err := page.Screenshot(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	stopTraffic()

	if strings.Join(v.Rules, ",") != "login,search,export" {
		t.Errorf("rules shown %v, want login, search, export", v.Rules)
	}
	if len(v.Limits) == 3 && (!strings.Contains(v.Limits[0], "20/1m sliding_window") || !strings.Contains(v.Limits[1], "50/1s token_bucket burst 100") || !strings.Contains(v.Limits[2], "gcra")) {
		t.Errorf("limits shown %q", v.Limits)
	}
	if v.LoginAllowed < 20 || v.LoginDenied < 1 || v.SearchDenied != 0 || v.ExportShadow < 1 {
		t.Errorf("login allowed %v denied %v, search denied %v, export shadow-denied %v: want login's 20 allowed (and the other client's) and some denied, no search denied, some export shadow-denied",
			v.LoginAllowed, v.LoginDenied, v.SearchDenied, v.ExportShadow)
	}
	var sawLimited bool
	for _, k := range v.Top {
		switch {
		case k.Rule == "login" && k.Key == mask:
			sawLimited = k.Denied > 0
		case k.Key == policy.MaskKey(unlimited):
			t.Errorf("the client under its limit is listed as limited: %+v", k)
		case k.Rule == "search":
			t.Errorf("search limited nobody, yet lists %+v", k)
		}
	}
	if !sawLimited {
		t.Errorf("the most limited keys %+v lack login's %s (%s masked) with denials", v.Top, limited, mask)
	}
	if strings.Contains(v.Text, limited) || strings.Contains(v.Text, unlimited) {
		t.Error("the page shows a client key in the clear")
	}
	if v.Login {
		t.Error("the page asks for the token of a server that needs none for its reads")
	}
	if v.Lines < 3 || v.Breaker != "closed" {
		t.Errorf("%d chart lines, breaker %q: want a line per rule's outcome, closed", v.Lines, v.Breaker)
	}

	if len(v.Reloads) != 2 || !strings.Contains(v.Reloads[0], "ok") || !strings.Contains(v.Reloads[1], "rejected") || !strings.Contains(v.Reloads[1], "perod") {
		t.Errorf("reloads shown %q, want the one applied, then the one rejected naming perod", v.Reloads)
	}

	// The page ran without an uncaught exception, a console error, a
	// resource that failed to load or a Content-Security-Policy violation.
	if errs := page.Errors(); len(errs) != 0 {
		t.Errorf("the page reported errors: %q", errs)
	}

	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is no PNG: %v", err)
	}
	if size := img.Bounds().Size(); size.X != 1280 {
		t.Fatalf("the screenshot is %v, want 1280 wide", size)
	}
	out := filepath.Join(t.TempDir(), "dashboard-"+strings.ToLower(br.name)+".png")
	if update {
		out = screenshotPath
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes, %v)", out, len(shot), img.Bounds().Size())
}

// getBody returns the status and body of GET url.
func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// servingAttr returns the attribute name of d's "serving" log line.
func servingAttr(t *testing.T, d *daemon, name string) string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, line := range d.lines {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == "serving" {
			return fmt.Sprint(entry[name])
		}
	}
	t.Fatalf("no serving line: %v", d.lines)
	return ""
}

// TestDashboardListeners: the dashboard on --listen (the default), on a
// listener of its own, or off; the decision API is unchanged by each.
func TestDashboardListeners(t *testing.T) {
	cfg := writeFile(t, dashboardRules)
	for _, tc := range []struct {
		name  string
		args  []string
		attr  string // the serving line's dashboard attribute, "" any address
		onAPI bool   // whether the main listener serves the dashboard
	}{
		{"default", nil, "on --listen", true},
		{"own listener", []string{"--dashboard-listen", "127.0.0.1:0"}, "", false},
		{"off", []string{"--dashboard=false"}, "off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startServe(t, nil, append([]string{"--config", cfg}, tc.args...)...)
			attr := servingAttr(t, d, "dashboard")
			if tc.attr != "" && attr != tc.attr {
				t.Fatalf("serving line: dashboard=%s, want %s", attr, tc.attr)
			}
			if code, _, body := d.post(t, "/v1/check", `{"rule":"login","key":"192.0.2.1"}`); code != 200 {
				t.Errorf("the API: %d %s", code, body)
			}
			code, body := getBody(t, d.base+"/")
			if onPage := code == 200 && strings.Contains(body, "<title>sluice dashboard</title>"); onPage != tc.onAPI {
				t.Errorf("GET / on --listen: %d %.100s; want the page: %v", code, body, tc.onAPI)
			}
			if !tc.onAPI && (code != 404 || !strings.Contains(body, `"NOT_FOUND"`)) {
				t.Errorf("GET / on --listen without the dashboard: %d %.200s, want the API's JSON 404", code, body)
			}
			code, body = getBody(t, d.base+admin.TopPath)
			if (code == 200) != tc.onAPI {
				t.Errorf("GET %s on --listen: %d %.200s", admin.TopPath, code, body)
			}
			if tc.attr == "" {
				base := "http://" + attr
				if code, body := getBody(t, base+"/"); code != 200 || !strings.Contains(body, "sluice dashboard") {
					t.Errorf("GET / on --dashboard-listen: %d %.100s", code, body)
				}
				code, body := getBody(t, base+admin.StatsPath)
				var st admin.Stats
				if code != 200 || json.Unmarshal([]byte(body), &st) != nil || len(st.Rules) != 3 {
					t.Errorf("GET %s on --dashboard-listen: %d %.300s", admin.StatsPath, code, body)
				}
				if code, body := getBody(t, base+"/v1/check"); code != 404 || !strings.Contains(body, "the dashboard serves") {
					t.Errorf("GET /v1/check on --dashboard-listen: %d %.200s, want the dashboard's 404", code, body)
				}
			}
		})
	}
}

// TestDashboardShowKeys: --show-keys lists keys in the clear.
func TestDashboardShowKeys(t *testing.T) {
	d := startServe(t, []string{"SLUICE_SHOW_KEYS=true"}, "--config", writeFile(t, dashboardRules))
	for range 3 {
		d.post(t, "/v1/check", `{"rule":"export","key":"key-b"}`)
	}
	_, body := getBody(t, d.base+admin.TopPath)
	var top admin.TopKeys
	if err := json.Unmarshal([]byte(body), &top); err != nil || top.Masked || len(top.Keys) != 1 || top.Keys[0] != (admin.TopKey{Rule: "export", Key: "key-b", Denied: 1, Shadow: true}) {
		t.Errorf("top with SLUICE_SHOW_KEYS=true: %s", body)
	}
}

func TestDashboardUsage(t *testing.T) {
	_, stderr, code := runBinary(t, nil, "serve", "--config", writeFile(t, dashboardRules), "--dashboard=false", "--dashboard-listen", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "--dashboard-listen") || !strings.Contains(stderr, "--dashboard=false") {
		t.Errorf("--dashboard=false with --dashboard-listen: exit %d, %s; want 2 naming both", code, stderr)
	}
}

// TestDashboardEnvoy: with an envoyproxy/ratelimit config, the rules are
// its descriptors' limits, named as their decisions are counted, and a
// reload rejected is listed with its error.
func TestDashboardEnvoy(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "edge.yaml")
	write := func(s string) {
		if err := os.WriteFile(conf, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	d := startServe(t, nil, "--config", dir, "--reload-interval", "100ms")
	for range 4 {
		body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.1"}]}]}`
		if code, _, resp := d.post(t, "/json", body); code != 200 && code != 429 {
			t.Fatalf("/json: %d %s", code, resp)
		}
	}
	write("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n")
	var st admin.Stats
	waitUntil(t, 15*time.Second, func() error {
		_, body := getBody(t, d.base+admin.StatsPath)
		st = admin.Stats{}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			return err
		}
		if len(st.Reloads) == 0 || len(st.Series.Rules) == 0 || len(st.Top.Keys) == 0 {
			return fmt.Errorf("no reload, series or top yet: %.400s", body)
		}
		return nil
	})
	if st.Config.Kind != "envoy" || !strings.Contains(st.Config.Summary, "envoy config: 1 domain") {
		t.Errorf("config %+v", st.Config)
	}
	if len(st.Rules) != 1 || st.Rules[0].Match != "edge: remote_address" || st.Rules[0].Limits[0].Limit != 2 || st.Rules[0].Limits[0].Period != "minute" {
		t.Fatalf("rules %+v, want edge's remote_address limit", st.Rules)
	}
	if s := st.Series.Rules[0]; s.Rule != st.Rules[0].Name || s.Total["allowed"] != 2 || s.Total["denied"] != 2 {
		t.Errorf("series %+v, want rule %s with 2 allowed and 2 denied", s, st.Rules[0].Name)
	}
	if k := st.Top.Keys[0]; k.Rule != st.Rules[0].Name || k.Denied != 2 || !strings.HasPrefix(k.Key, "#") {
		t.Errorf("top %+v, want the descriptor masked, 2 denied", st.Top.Keys)
	}
	if r := st.Reloads[0]; r.Outcome != "rejected" || !strings.Contains(r.Error, "fortnight") {
		t.Errorf("reloads %+v, want the rejection naming fortnight", st.Reloads)
	}
}

// openPage opens url in br at path, closed when t ends.
func openPage(ctx context.Context, t *testing.T, br dashboardBrowser, path, url string) pagetest.Page {
	t.Helper()
	page, _ := br.open(ctx, t, path)
	if err := page.Navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	return page
}

// TestDashboardHostileKey: a client key of HTML, shown in the clear
// (--show-keys), is shown as text, in each browser: it adds no element
// to the page and runs nothing.
func TestDashboardHostileKey(t *testing.T) {
	for _, br := range browsers {
		t.Run(br.name, func(t *testing.T) {
			browserPath := findBrowser(t, br)
			const key = `<img src=x onerror="document.title='pwned'"><b id=pwned>`
			d := startServe(t, []string{"SLUICE_SHOW_KEYS=true"}, "--config", writeFile(t, dashboardRules))
			for range 3 {
				body, _ := json.Marshal(map[string]string{"rule": "export", "key": key})
				d.post(t, "/v1/check", string(body))
			}
			ctx := pagetest.Context(t)
			page := openPage(ctx, t, br, browserPath, d.base+"/")
			if err := page.WaitFor(ctx, `document.querySelector("#top tbody tr")`); err != nil {
				t.Fatal(err)
			}
			var v struct {
				Key    string `json:"key"`
				Title  string `json:"title"`
				Images int    `json:"images"`
				Pwned  bool   `json:"pwned"`
			}
			if err := page.Evaluate(ctx, `({key: document.querySelector("#top td.key").textContent, title: document.title,
				images: document.querySelectorAll("img").length, pwned: document.getElementById("pwned") !== null})`, &v); err != nil {
				t.Fatal(err)
			}
			if v.Key != key || v.Title != "sluice dashboard" || v.Images != 0 || v.Pwned {
				t.Errorf("the page with a key of HTML: %+v, want the key as text and no element of it", v)
			}
			if errs := page.Errors(); len(errs) != 0 {
				t.Errorf("the page reported errors: %q", errs)
			}
		})
	}
}

// TestDashboardHungPoll: a poll that never gets an answer does not stop
// the page's updates, in each browser: it is given up, said so, and
// polled again.
func TestDashboardHungPoll(t *testing.T) {
	for _, br := range browsers {
		t.Run(br.name, func(t *testing.T) {
			browserPath := findBrowser(t, br)
			h := admin.New()
			var polls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == admin.StatsPath && polls.Add(1) == 1 {
					select { // the first poll hangs, until the page gives it up
					case <-r.Context().Done():
					case <-time.After(time.Minute):
					}
					return
				}
				h.ServeHTTP(w, r)
			}))
			defer srv.Close()
			ctx := pagetest.Context(t)
			page := openPage(ctx, t, br, browserPath, srv.URL+"/")
			if err := page.WaitFor(ctx, `document.body.hasAttribute("data-updated")`); err != nil {
				var status string
				_ = page.Evaluate(context.Background(), `document.getElementById("status").textContent`, &status)
				t.Fatalf("the page after a hung poll (%d polls): %v; status %q", polls.Load(), err, status)
			}
			if n := polls.Load(); n < 2 {
				t.Errorf("%d polls, want the hung one and another", n)
			}
		})
	}
}

// dashboardSlotsRules: ten slots for the whole fleet, two of them kept
// for critical jobs, and three slots per uploader.
const dashboardSlotsRules = `
redis:
  on_error: deny
rules:
  - {name: jobs, key: global, algorithm: concurrency, limit: 10, ttl: 30s, priority: {reserve: {critical: 20%}}}
  - {name: uploads, key: request, algorithm: concurrency, limit: 3, ttl: 30s}
`

// slotsView is what TestDashboardSlots reads off the page's DOM.
type slotsView struct {
	JobsInUse    float64            `json:"jobsInUse"`
	JobsSlots    string             `json:"jobsSlots"`
	UploadsSlots string             `json:"uploadsSlots"`
	Shed         map[string]float64 `json:"shed"`
}

// readSlots is the JavaScript that reads a slotsView.
const readSlots = `(() => {
  const row = (n) => [...document.querySelectorAll("#rules tbody tr")].find((r) => r.dataset.rule === n);
  const jobs = row("jobs"), uploads = row("uploads");
  const text = (tr, sel) => { const e = tr && tr.querySelector(sel); return e ? e.textContent : ""; };
  const inUse = text(jobs, '[data-field="slots"] [data-field="in_use"]');
  const shed = {};
  for (const b of jobs ? jobs.querySelectorAll('[data-field="shed"] [data-class-shed]') : []) shed[b.dataset.classShed] = Number(b.textContent.replace(/,/g, ""));
  return {
    jobsInUse: inUse === "" ? -1 : Number(inUse.replace(/,/g, "")),
    jobsSlots: text(jobs, '[data-field="slots"]'),
    uploadsSlots: text(uploads, '[data-field="slots"]'),
    shed: shed,
  };
})()`

// TestDashboardSlots: two sluice serve replicas share a real
// redis-server. Jobs hold slots through both, and each replica sheds some
// of the default class. The dashboard of either shows the slots of the
// global rule in use across the fleet (10 of 10, the critical class's
// included, then 6 once four are released on both replicas), an
// uploader's rule's slots as per key, and the requests its own replica
// shed by class (3 of default on the first, 2 on the second); neither
// replica counts a slot in its sluice_slots_held, which a client of
// /v1/check holds. Headless Chromium shows the first replica's figures
// and their update, Firefox them after.
func TestDashboardSlots(t *testing.T) {
	srv := redistest.Start(t)
	cfg := writeFile(t, dashboardSlotsRules)
	env := []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}
	a, b := startServe(t, env, "--config", cfg), startServe(t, env, "--config", cfg)

	// check sends a check of jobs of class to d and returns its answer.
	type answer struct {
		Allowed     bool   `json:"allowed"`
		Shed        bool   `json:"shed"`
		Reservation string `json:"reservation"`
	}
	check := func(d *daemon, rule, class string, status int) answer {
		t.Helper()
		body := fmt.Sprintf(`{"rule":%q,"key":"k1","class":%q}`, rule, class)
		code, _, resp := d.post(t, "/v1/check", body)
		var got answer
		if code != status || json.Unmarshal([]byte(resp), &got) != nil {
			t.Fatalf("%s of %s on %s: %d %s, want %d", rule, class, d.base, code, resp, status)
		}
		return got
	}
	var held []string // the reservations of the jobs holding slots
	for range 8 {     // the default class's 80%, through b
		held = append(held, check(b, "jobs", "", http.StatusOK).Reservation)
	}
	for range 3 { // shed by a
		if got := check(a, "jobs", "", http.StatusTooManyRequests); !got.Shed {
			t.Fatalf("a default job with 8 slots held: %+v, want shed", got)
		}
	}
	for range 2 { // the critical class's reserve, through a
		held = append(held, check(a, "jobs", "critical", http.StatusOK).Reservation)
	}
	if got := check(a, "jobs", "critical", http.StatusTooManyRequests); got.Shed {
		t.Fatalf("a critical job with every slot held: %+v, want denied, not shed", got)
	}
	for range 2 { // shed by b
		check(b, "jobs", "", http.StatusTooManyRequests)
	}
	check(a, "uploads", "", http.StatusOK)
	for _, r := range held {
		if r == "" {
			t.Fatalf("an admitted job without a reservation: %q", held)
		}
	}

	stats := func(d *daemon) admin.Stats {
		t.Helper()
		code, body := getBody(t, d.base+admin.StatsPath)
		var st admin.Stats
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
			t.Fatalf("stats of %s: %d %.300s", d.base, code, body)
		}
		return st
	}
	// slots says what st shows of the slots and of jobs' sheds.
	slots := func(st admin.Stats) string {
		var parts []string
		for _, s := range st.Slots {
			n := "null"
			if s.InUse != nil {
				n = strconv.Itoa(*s.InUse)
			}
			parts = append(parts, fmt.Sprintf("%s/%s %s of %d per_key=%v %s", s.Rule, s.Limit, n, s.Slots, s.PerKey, s.Error))
		}
		for _, rs := range st.Series.Rules {
			if rs.Rule == "jobs" {
				parts = append(parts, fmt.Sprintf("shed %v", rs.Shed))
			}
		}
		return strings.Join(parts, "; ")
	}
	wantStats := func(d *daemon, inUse, shed int) {
		t.Helper()
		want := fmt.Sprintf("jobs/jobs-concurrent %d of 10 per_key=false ; uploads/uploads-concurrent null of 3 per_key=true ; shed map[default:%d]", inUse, shed)
		var got string
		waitUntil(t, 15*time.Second, func() error { // the sheds: sampled once a second
			if got = slots(stats(d)); got != want {
				return fmt.Errorf("%s shows %q, want %q", d.base, got, want)
			}
			return nil
		})
	}
	wantStats(a, 10, 3)
	wantStats(b, 10, 2)
	for _, d := range []*daemon{a, b} {
		if text := scrapeMetrics(t, d); !strings.Contains(text, `sluice_slots_held{rule="jobs"} 0`+"\n") {
			t.Errorf("%s counts slots its clients hold: %s", d.base, grepLines(text, "sluice_slots_held"))
		}
	}

	// release releases 4 jobs' slots, two through each replica.
	release := func(t *testing.T) {
		for i, r := range held[:4] {
			d := []*daemon{a, b}[i%2]
			if code, _, body := d.post(t, "/v1/release", fmt.Sprintf(`{"reservation":%q}`, r)); code != http.StatusOK {
				t.Fatalf("release on %s: %d %s", d.base, code, body)
			}
		}
	}
	wantPage := func(t *testing.T, ctx context.Context, page pagetest.Page, stderr func() string, inUse float64) {
		t.Helper()
		var v slotsView
		for {
			if err := page.Evaluate(ctx, readSlots, &v); err != nil {
				t.Fatalf("reading the page: %v\n%s", err, stderr())
			}
			if v.JobsInUse == inUse && v.Shed["default"] == 3 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the page shows %+v, want jobs' %v slots in use and default's 3 shed", v, inUse)
			case <-time.After(100 * time.Millisecond):
			}
		}
		if v.JobsSlots != fmt.Sprintf("slots in use: %v of 10", inUse) || v.UploadsSlots != "slots: 3 per key" || len(v.Shed) != 1 {
			t.Errorf("the page shows %+v, want jobs' %v of 10 in use, uploads' 3 per key, and default's sheds alone (critical is never shed)", v, inUse)
		}
		if errs := page.Errors(); len(errs) != 0 {
			t.Errorf("the page reported errors: %q", errs)
		}
	}
	released := false
	for _, br := range browsers {
		t.Run(br.name, func(t *testing.T) {
			path := findBrowser(t, br)
			ctx := pagetest.Context(t)
			page, stderr := br.open(ctx, t, path)
			if err := page.Navigate(ctx, a.base+"/"); err != nil {
				t.Fatal(err)
			}
			if !released {
				wantPage(t, ctx, page, stderr, 10)
				release(t)
				released = true
			}
			wantPage(t, ctx, page, stderr, 6) // the first browser: as it updates
		})
	}
	if !released {
		release(t) // no browser ran
	}
	wantStats(a, 6, 3)
	wantStats(b, 6, 2)
}
