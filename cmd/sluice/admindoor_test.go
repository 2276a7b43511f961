//go:build integration

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/service/admin"
	"github.com/sluice-go/sluice/policy"
)

// doorRequest is one request to the admin door of a running sluice serve.
type doorRequest struct {
	method, url  string
	host, origin string
	auth, body   string
	from         string // the client's loopback address ("": 127.0.0.1)
}

// send sends q and returns the status, the header and the body.
func (q doorRequest) send(t *testing.T) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
	}
	r, err := http.NewRequest(cmp.Or(q.method, "GET"), q.url, body)
	if err != nil {
		t.Fatal(err)
	}
	if q.host != "" {
		r.Host = q.host
	}
	for k, v := range map[string]string{"Origin": q.origin, "Authorization": q.auth} {
		if v != "" {
			r.Header.Set(k, v)
		}
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	if q.from != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(q.from)}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestAdminHosts: sluice serve's dashboard and operator API refuse a
// request to a Host that is not localhost, an IP address, the name of
// their listener's address or one of --admin-hosts (DNS rebinding), on
// --listen and on a listener of their own; the decision API and the
// probes beside them on --listen answer any Host.
func TestAdminHosts(t *testing.T) {
	cfg := writeFile(t, dashboardRules)
	onListen := startServe(t, nil, "--config", cfg)
	listed := startServe(t, []string{admin.HostsEnv + "=sluice.test, dash.example.com"}, "--config", cfg)
	own := startServe(t, nil, "--config", cfg, "--dashboard-listen", "127.0.0.1:0")
	ownBase := "http://" + servingAttr(t, own, "dashboard")
	for _, c := range []struct {
		name      string
		base      string
		path      string
		host      string
		refused   bool
		otherDoor bool // the decision API or a probe, not the dashboard
	}{
		{"the page to its address", onListen.base, "/", "", false, false},
		{"the page through port-forward (localhost:PORT)", onListen.base, "/", "localhost:8083", false, false},
		{"the page to a Pod IP (a probe)", onListen.base, "/", "10.1.2.3:8080", false, false},
		{"the page to a rebinding name", onListen.base, "/", "attacker.example:8080", true, false},
		{"stats to a rebinding name", onListen.base, admin.StatsPath, "attacker.example", true, false},
		{"stats to a name not listed", onListen.base, admin.StatsPath, "sluice.test", true, false},
		{"stats to a listed name", listed.base, admin.StatsPath, "sluice.test:8080", false, false},
		{"stats to another listed name", listed.base, admin.StatsPath, "DASH.example.com", false, false},
		{"the decision API to any name", onListen.base, "/healthz", "attacker.example", false, true},
		{"metrics to any name", onListen.base, "/metrics", "attacker.example", false, true},
		{"its own listener to its address", ownBase, admin.StatsPath, "", false, false},
		{"its own listener through localhost", ownBase, admin.StatsPath, "localhost", false, false},
		{"its own listener to a rebinding name", ownBase, admin.StatsPath, "attacker.example", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := doorRequest{url: c.base + c.path, host: c.host}.send(t)
			if c.refused {
				if code != http.StatusMisdirectedRequest || !strings.Contains(body, "HOST_NOT_ALLOWED") || !strings.Contains(body, admin.HostsEnv) || !strings.Contains(body, "--admin-hosts") {
					t.Errorf("GET %s with Host %q: %d %.300s, want 421 naming %s", c.path, c.host, code, body, admin.HostsEnv)
				}
				return
			}
			if code != http.StatusOK {
				t.Errorf("GET %s with Host %q: %d %.300s, want 200", c.path, c.host, code, body)
			}
		})
	}
	code, _, body := doorRequest{url: listed.base + admin.StatsPath, host: "attacker.example"}.send(t)
	if code != http.StatusMisdirectedRequest || !strings.Contains(body, "dash.example.com, sluice.test") {
		t.Errorf("with --admin-hosts, a rebinding name: %d %.300s, want 421 listing the names", code, body)
	}
}

// TestAdminDoorUsage: a bad --admin-hosts or --admin-auth, --admin-auth
// all without a token, and either with the dashboard off, are usage
// errors naming the flag.
func TestAdminDoorUsage(t *testing.T) {
	cfg := writeFile(t, dashboardRules)
	for _, c := range []struct {
		env  []string
		args []string
		says []string
	}{
		{nil, []string{"--admin-hosts", "sluice.test:8083"}, []string{"--admin-hosts", "without a port"}},
		{[]string{admin.HostsEnv + "=http://sluice.test"}, nil, []string{admin.HostsEnv, "not URLs"}},
		{nil, []string{"--admin-auth", "reads"}, []string{"--admin-auth", `"reads" is not writes`}},
		{[]string{admin.TokenEnv + "="}, []string{"--admin-auth", "all"}, []string{"--admin-auth all", admin.TokenEnv}},
		{nil, []string{"--dashboard=false", "--admin-hosts", "sluice.test"}, []string{"--admin-hosts", "--dashboard=false"}},
		{[]string{admin.TokenEnv + "=x"}, []string{"--dashboard=false", "--admin-auth", "all"}, []string{"--admin-auth", "--dashboard=false"}},
	} {
		_, stderr, code := runBinary(t, c.env, append([]string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--grpc-listen", ""}, c.args...)...)
		if code != 2 {
			t.Errorf("%v %v: exit %d, want 2: %s", c.env, c.args, code, stderr)
		}
		for _, s := range c.says {
			if !strings.Contains(stderr, s) {
				t.Errorf("%v %v: %q does not say %s", c.env, c.args, stderr, s)
			}
		}
	}
}

// TestAdminCrossOrigin: a reset with the right token, sent by a page of
// another origin, is refused with 403 and forgets nothing; the same reset
// from the dashboard's own origin, or from sluice reset (no Origin), is
// applied.
func TestAdminCrossOrigin(t *testing.T) {
	d := startServe(t, []string{admin.TokenEnv + "=secret"}, "--config", writeFile(t, operatorRules))
	host := strings.TrimPrefix(d.base, "http://")
	spend := func() {
		for range 3 {
			d.post(t, "/v1/check", `{"rule":"fw","key":"a"}`)
		}
	}
	for _, c := range []struct {
		origin string
		want   int
	}{
		{"https://attacker.example", 403},
		{"http://192.168.1.20:8000", 403},
		{"null", 403},
		{"http://" + host, 200},
		{"", 200},
	} {
		spend()
		code, _, body := doorRequest{method: "POST", url: d.base + admin.ResetPath, origin: c.origin, auth: "Bearer secret", body: `{"rule":"fw","key":"a"}`}.send(t)
		if code != c.want || c.want == 403 && !strings.Contains(body, "ORIGIN_NOT_ALLOWED") {
			t.Errorf("reset from Origin %q: %d %.300s, want %d", c.origin, code, body, c.want)
		}
		if in := inspect(t, d, "fw", "a", 1); in.Allowed != (c.want == 200) {
			t.Errorf("after the reset from Origin %q (%d): the key may pass %v", c.origin, code, in.Allowed)
		}
	}
}

// TestAdminBruteForce: wrong tokens sent to sluice serve are answered
// 401 until FailuresPerAddress of them, then every request that needs
// the token from that address is answered 429 with Retry-After and the
// RATE_LIMITED body, the right one too; another address still gets in;
// sluice reset says what the server said; each refusal is logged at
// Warn with the address masked.
func TestAdminBruteForce(t *testing.T) {
	d := startServe(t, []string{admin.TokenEnv + "=secret"}, "--config", writeFile(t, operatorRules))
	reset := func(token, from string) (int, http.Header, string) {
		return doorRequest{method: "POST", url: d.base + admin.ResetPath, auth: "Bearer " + token, from: from, body: `{"rule":"fw","key":"a"}`}.send(t)
	}
	if code, _, body := reset("secret", ""); code != 200 {
		t.Fatalf("the right token: %d %s", code, body)
	}
	// Wrong tokens until one is refused 429 (a token of the limit may
	// have come back meanwhile), then at once the right one.
	wrongs := 0
	for {
		code, _, body := reset("guess", "")
		if code == 429 {
			break
		}
		if code != 401 || wrongs > 2*admin.FailuresPerAddress {
			t.Fatalf("wrong token %d: %d %s", wrongs+1, code, body)
		}
		wrongs++
	}
	code, h, body := reset("secret", "")
	var e struct {
		Error struct {
			Code       string `json:"code"`
			RetryAfter int    `json:"retry_after"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	if wrongs < admin.FailuresPerAddress || code != 429 || e.Error.Code != "RATE_LIMITED" || h.Get("Retry-After") == "" || e.Error.RetryAfter < 1 || e.Error.RetryAfter > 12 {
		t.Errorf("the right token after %d wrong ones: %d %v %s, want 429 with Retry-After and RATE_LIMITED", wrongs, code, h, body)
	}
	t.Setenv(admin.TokenEnv, "secret")
	var out bytes.Buffer
	if c := Run(context.Background(), []string{"reset", "--rule", "fw", "--key", "a", "--server", d.base}, &out, &out); c != 1 || !strings.Contains(out.String(), "429") || !strings.Contains(out.String(), "retry after") {
		t.Errorf("sluice reset from the limited address: exit %d: %s, want 1 saying 429", c, out.String())
	}
	if code, _, body := reset("secret", "127.0.0.2"); code != 200 {
		t.Errorf("the right token from another address: %d %s", code, body)
	}
	wrong := d.waitLog(t, "sluice: admin request refused: a wrong bearer token")
	limited := d.waitLog(t, "sluice: admin request refused: too many wrong bearer tokens")
	for _, e := range []map[string]any{wrong, limited} {
		if e["level"] != "WARN" || e["remote"] != policy.MaskKey("127.0.0.1") {
			t.Errorf("refusal logged as %v, want WARN and the address masked", e)
		}
	}
}

// TestAdminAuthAll: with --admin-auth all, stats, top and inspect need
// the token (the page does not); sluice top and inspect send it from
// their SLUICE_ADMIN_TOKEN, and without it say so.
func TestAdminAuthAll(t *testing.T) {
	d := startServe(t, []string{admin.TokenEnv + "=secret", admin.AuthEnv + "=all"}, "--config", writeFile(t, operatorRules))
	for _, path := range []string{admin.StatsPath, admin.TopPath, admin.InspectPath + "?rule=fw&key=a"} {
		if code, _, body := (doorRequest{url: d.base + path}).send(t); code != 401 {
			t.Errorf("GET %s without the token: %d %.200s, want 401", path, code, body)
		}
		if code, _, body := (doorRequest{url: d.base + path, auth: "Bearer secret"}).send(t); code != 200 {
			t.Errorf("GET %s with the token: %d %.200s", path, code, body)
		}
	}
	if code, body := getBody(t, d.base+"/"); code != 200 || !strings.Contains(body, `id="login"`) {
		t.Errorf("GET / without the token: %d, want the page, which asks for it", code)
	}
	t.Setenv(admin.TokenEnv, "")
	var out bytes.Buffer
	if c := Run(context.Background(), []string{"top", "--server", d.base}, &out, &out); c != 1 || !strings.Contains(out.String(), "401") || !strings.Contains(out.String(), admin.TokenEnv+", which is not set") {
		t.Errorf("sluice top without %s: exit %d: %s", admin.TokenEnv, c, out.String())
	}
	t.Setenv(admin.TokenEnv, "secret")
	if out := operator(t, d, "top"); !strings.Contains(out, "no key has been limited") {
		t.Errorf("sluice top with the token: %s", out)
	}
	if in := inspect(t, d, "fw", "a", 1); !in.Allowed {
		t.Errorf("sluice inspect with the token: %+v", in)
	}
}

// httptestRequest returns a GET of the stats with Host host.
func httptestRequest(host string) *http.Request {
	r := httptest.NewRequest("GET", admin.StatsPath, nil)
	r.Host = host
	return r
}

// serveCode returns the status h answers r with.
func serveCode(h http.Handler, r *http.Request) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Code
}

// TestAdminListenName: the host of the dashboard's listener's address,
// when it is a name, is answered besides --admin-hosts; an address adds
// nothing.
func TestAdminListenName(t *testing.T) {
	for _, c := range []struct{ listen, hosts, want string }{
		{"sluice-admin.internal:8083", "", "sluice-admin.internal"},
		{"sluice-admin.internal:8083", "b.example", "b.example,sluice-admin.internal"},
		{"127.0.0.1:8083", "b.example", "b.example"},
		{":8083", "", ""},
	} {
		auth := "writes"
		f := &dashboardFlags{hosts: &c.hosts, auth: &auth}
		opts, err := f.door(c.listen, "")
		if err != nil {
			t.Fatal(err)
		}
		h := admin.New(opts...)
		for _, name := range strings.Split(c.want, ",") {
			if name == "" {
				continue
			}
			r := httptestRequest(name)
			if code := serveCode(h, r); code != 200 {
				t.Errorf("listen %s, --admin-hosts %q: Host %s answered %d, want 200", c.listen, c.hosts, name, code)
			}
		}
		if code := serveCode(h, httptestRequest("other.example")); code != http.StatusMisdirectedRequest {
			t.Errorf("listen %s: Host other.example answered %d, want 421", c.listen, code)
		}
	}
}
