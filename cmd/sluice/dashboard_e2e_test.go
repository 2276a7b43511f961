//go:build e2e

package main

// The dashboard as browsers show it (go test -tags e2e): each test drives
// headless Chromium and, where it says so, Firefox (browser_e2e_test.go).

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

	"github.com/sluice-go/sluice/internal/service/admin"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
)

// screenshotPath is the committed screenshot of the dashboard that the
// README shows: TestDashboard writes it when SLUICE_UPDATE_SCREENSHOT=1
// (go test -tags e2e -run TestDashboard$ ./cmd/sluice/), else to a temporary
// directory, so that tests leave the tree as it was.
const screenshotPath = "../../docs/dashboard.png"

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
	ctx := browserContext(t)
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

// openPage opens url in br at path, closed when t ends.
func openPage(ctx context.Context, t *testing.T, br dashboardBrowser, path, url string) browserPage {
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
			ctx := browserContext(t)
			page := openPage(ctx, t, br, browserPath, d.base+"/")
			if err := waitFor(ctx, page, `document.querySelector("#top tbody tr")`); err != nil {
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
			ctx := browserContext(t)
			page := openPage(ctx, t, br, browserPath, srv.URL+"/")
			if err := waitFor(ctx, page, `document.body.hasAttribute("data-updated")`); err != nil {
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
	wantPage := func(t *testing.T, ctx context.Context, page browserPage, stderr func() string, inUse float64) {
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
			ctx := browserContext(t)
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

// TestDashboardToken: with --admin-auth all, the page, in each browser,
// asks for the token and shows nothing before; a wrong one is refused
// and asked again; the right one shows the dashboard, is kept by the tab
// through a reload, and is forgotten on request.
func TestDashboardToken(t *testing.T) {
	for _, br := range browsers {
		t.Run(br.name, func(t *testing.T) {
			browserPath := findBrowser(t, br)
			d := startServe(t, []string{admin.TokenEnv + "=secret", admin.AuthEnv + "=all"}, "--config", writeFile(t, dashboardRules))
			ctx := browserContext(t)
			page := openPage(ctx, t, br, browserPath, d.base+"/")
			type view struct {
				Rules   int    `json:"rules"`
				Status  string `json:"status"`
				Updated bool   `json:"updated"`
				Login   bool   `json:"login"`
				Error   string `json:"error"`
				Forget  bool   `json:"forget"`
				Stored  string `json:"stored"`
			}
			read := func() view {
				t.Helper()
				var v view
				if err := page.Evaluate(ctx, `({rules: document.querySelectorAll("#rules tbody tr").length,
					status: document.getElementById("status").textContent, updated: document.body.hasAttribute("data-updated"),
					login: document.getElementById("login").getClientRects().length > 0, error: document.getElementById("login-error").textContent,
					forget: document.getElementById("forget").getClientRects().length > 0, stored: sessionStorage.getItem("sluice-admin-token") || ""})`, &v); err != nil {
					t.Fatal(err)
				}
				return v
			}
			wait := func(what, cond string) view {
				t.Helper()
				if err := waitFor(ctx, page, cond); err != nil {
					t.Fatalf("%s: %v; the page: %+v", what, err, read())
				}
				return read()
			}
			submit := func(token string) {
				t.Helper()
				js := `(() => { document.getElementById("token").value = ` + strconv.Quote(token) + `; document.getElementById("login").requestSubmit(); return true; })()`
				if err := page.Evaluate(ctx, js, nil); err != nil {
					t.Fatal(err)
				}
			}
			// Shown, as the page lays it out (not only its hidden attribute).
			loginShown := `document.getElementById("login").getClientRects().length > 0`
			if v := wait("the page asks for the token", loginShown); v.Rules != 0 || v.Updated || v.Status != "needs the admin token" || v.Error != "" {
				t.Errorf("before the token: %+v, want nothing shown but the question", v)
			}
			submit("wrong")
			if v := wait("a wrong token refused", loginShown+` && document.getElementById("login-error").textContent !== ""`); v.Rules != 0 || v.Updated || !strings.Contains(v.Error, "refused") || v.Stored != "" {
				t.Errorf("after a wrong token: %+v, want it refused, forgotten, nothing shown", v)
			}
			submit("secret")
			updated := `document.body.hasAttribute("data-updated") && document.querySelectorAll("#rules tbody tr").length === 3`
			if v := wait("the dashboard with the token", updated); v.Login || !v.Forget || v.Stored != "secret" {
				t.Errorf("with the token: %+v, want the dashboard, the token kept and a way to forget it", v)
			}
			if err := page.Navigate(ctx, d.base+"/"); err != nil {
				t.Fatal(err)
			}
			if v := wait("the dashboard after a reload", updated); v.Login {
				t.Errorf("after a reload: %+v, want the dashboard without asking again", v)
			}
			if err := page.Evaluate(ctx, `(() => { document.getElementById("forget").click(); return true; })()`, nil); err != nil {
				t.Fatal(err)
			}
			if v := wait("the token forgotten", loginShown); v.Stored != "" {
				t.Errorf("after forget: %+v, want the token gone", v)
			}
			// The page's errors are the 401s of its three polls without the
			// right token (before any, the wrong one, after forgetting it),
			// after each of which it waits for a token rather than poll
			// again, and none else (no CSP violation, no exception).
			errs := waitErrors(page, 3)
			for _, e := range errs {
				if !strings.Contains(e, admin.StatsPath) || !strings.Contains(e, "401") {
					t.Errorf("the page reported %q, not a 401 of %s", e, admin.StatsPath)
				}
			}
			if len(errs) != 3 {
				t.Errorf("the page reported %d errors %q, want the 3 401s of its polls", len(errs), errs)
			}
			if e := d.waitLog(t, "sluice: admin request refused: a wrong bearer token"); e["path"] != admin.StatsPath {
				t.Errorf("the wrong token logged as %v", e)
			}
		})
	}
}
