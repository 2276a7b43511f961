package admin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/internal/service/admin"
	"github.com/sluice-go/sluice/policy"
)

const doorToken = "s3cret-t0ken"

// door is a Handler served over real HTTP on loopback, with a fake clock
// for its failed token attempts and a log to read.
type door struct {
	f    *fixture
	srv  *httptest.Server
	port string

	clock atomic.Int64 // UnixMicro of the fake clock
	mu    sync.Mutex
	log   bytes.Buffer
}

// newDoor serves a fixture's Handler with the token and opts.
func newDoor(t *testing.T, opts ...admin.Option) *door {
	t.Helper()
	d := &door{}
	d.clock.Store(time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC).UnixMicro())
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&d.mu, &d.log}, nil))
	opts = append([]admin.Option{admin.WithToken(doorToken), admin.WithLogger(logger),
		admin.WithClock(func() time.Time { return time.UnixMicro(d.clock.Load()) })}, opts...)
	d.f = newFixture(t, opts...)
	d.srv = httptest.NewServer(d.f.h)
	t.Cleanup(d.srv.Close)
	_, d.port, _ = net.SplitHostPort(d.srv.Listener.Addr().String())
	return d
}

// advance moves the fake clock by dt.
func (d *door) advance(dt time.Duration) { d.clock.Add(dt.Microseconds()) }

// logs returns the log lines so far.
func (d *door) logs() []map[string]any {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(d.log.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// req is one request to a door.
type req struct {
	method, path string
	host         string // "": the server's address
	origin, auth string
	body         string
	from         string // the client's loopback address ("": the system's choice, 127.0.0.1)
}

// answer is what a door answered.
type answer struct {
	code   int
	header http.Header
	body   string
	err    httpjson.ErrorDetail
}

// clients are HTTP clients by local address, each dialing from it.
var clients sync.Map

func clientFrom(from string) *http.Client {
	if c, ok := clients.Load(from); ok {
		return c.(*http.Client)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	if from != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, _ := clients.LoadOrStore(from, &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext}})
	return c.(*http.Client)
}

// do sends q to d over loopback.
func (d *door) do(t *testing.T, q req) answer {
	t.Helper()
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
	}
	r, err := http.NewRequestWithContext(context.Background(), q.method, d.srv.URL+q.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if q.host != "" {
		r.Host = strings.ReplaceAll(q.host, "PORT", d.port)
	}
	if q.origin != "" {
		r.Header.Set("Origin", strings.ReplaceAll(q.origin, "PORT", d.port))
	}
	if q.auth != "" {
		r.Header.Set("Authorization", q.auth)
	}
	resp, err := clientFrom(q.from).Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header, body: string(b)}
	var e httpjson.ErrorBody
	if json.Unmarshal(b, &e) == nil {
		a.err = e.Error
	}
	return a
}

// TestHosts: over loopback, the page, its assets and the API answer a
// request to localhost or an IP address (the listener's own, or any
// other), and to the names allowed; any other Host (a DNS rebinding
// attacker's name, resolved to loopback) is refused with 421 saying
// which hosts are answered and how to allow more.
func TestHosts(t *testing.T) {
	open := newDoor(t)
	listed, err := admin.ParseHosts("sluice.internal, Dashboard.Example.com")
	if err != nil {
		t.Fatal(err)
	}
	named := newDoor(t, admin.WithHosts(listed))
	star, _ := admin.ParseHosts("*")
	anyHost := newDoor(t, admin.WithHosts(star))
	paths := []string{"/", admin.AssetsPrefix + "app.js", admin.StatsPath, admin.TopPath, admin.InspectPath + "?rule=login&key=192.0.2.1", "/admin/v1/nope"}
	for _, c := range []struct {
		name string
		d    *door
		host string
		ok   bool
	}{
		{"the listener's address", open, "127.0.0.1:PORT", true},
		{"localhost", open, "localhost:PORT", true},
		{"localhost without a port", open, "localhost", true},
		{"localhost in capitals with a trailing dot", open, "LOCALHOST.:PORT", true},
		{"IPv6 loopback", open, "[::1]:PORT", true},
		{"another IP address", open, "192.0.2.10:PORT", true},
		{"an IPv6 address", open, "[2001:db8::1]", true},
		{"a rebinding name", open, "attacker.example:PORT", false},
		{"localhost as a subdomain", open, "localhost.attacker.example:PORT", false},
		{"a name that spells an address", open, "127.0.0.1.nip.io:PORT", false},
		{"a name not listed", open, "sluice.internal:PORT", false},
		{"a listed name", named, "sluice.internal:PORT", true},
		{"a listed name in another case", named, "dashboard.example.COM", true},
		{"a name beside a listed one", named, "evil.sluice.internal", false},
		{"any name under *", anyHost, "attacker.example:PORT", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, path := range paths {
				a := c.d.do(t, req{method: "GET", path: path, host: c.host})
				if refused := a.code == http.StatusMisdirectedRequest; refused == c.ok {
					t.Errorf("GET %s with Host %s: %d %.200s, want refused %v", path, c.host, a.code, a.body, !c.ok)
				}
				if c.ok {
					continue
				}
				if a.err.Code != "HOST_NOT_ALLOWED" || !strings.Contains(a.err.Message, admin.HostsEnv) || !strings.Contains(a.err.Message, "it answers to localhost") {
					t.Errorf("GET %s with Host %s: %s, want HOST_NOT_ALLOWED saying what is answered and %s", path, c.host, a.body, admin.HostsEnv)
				}
				if c.d == named && !strings.Contains(a.err.Message, "dashboard.example.com, sluice.internal") {
					t.Errorf("the refusal %q does not list the allowed names", a.err.Message)
				}
			}
		})
	}
}

// TestHostless: a request without a Host (HTTP/1.0, no browser sends
// one) is answered.
func TestHostless(t *testing.T) {
	d := newDoor(t)
	conn, err := net.DialTimeout("tcp", d.srv.Listener.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET "+admin.TopPath+" HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET without a Host: %d, want 200", resp.StatusCode)
	}
}

// TestOrigin: a reset (a POST) sent by a page of another origin, with
// the right token, is refused with 403 and changes nothing: the page of
// an IP address or of localhost on another port is another origin. The
// dashboard's own page, a listed name and a client that sends no Origin
// (sluice reset, curl) pass; a read with another Origin is answered (the
// browser does not let that page read it).
func TestOrigin(t *testing.T) {
	listed, _ := admin.ParseHosts("dashboard.example.com")
	star, _ := admin.ParseHosts("*")
	open, named, anyOrigin := newDoor(t), newDoor(t, admin.WithHosts(listed)), newDoor(t, admin.WithHosts(star))
	bearer := "Bearer " + doorToken
	for _, c := range []struct {
		name           string
		d              *door
		host, origin   string
		method, path   string
		want           int
		code, messages string
	}{
		{"no Origin", open, "", "", "POST", admin.ResetPath, 200, "", ""},
		{"the same origin", open, "127.0.0.1:PORT", "http://127.0.0.1:PORT", "POST", admin.ResetPath, 200, "", ""},
		{"the same origin, through localhost", open, "localhost:PORT", "http://localhost:PORT", "POST", admin.ResetPath, 200, "", ""},
		{"a site", open, "127.0.0.1:PORT", "https://attacker.example", "POST", admin.ResetPath, 403, "ORIGIN_NOT_ALLOWED", "attacker.example"},
		{"a page of an IP address", open, "127.0.0.1:PORT", "http://203.0.113.9", "POST", admin.ResetPath, 403, "ORIGIN_NOT_ALLOWED", "203.0.113.9"},
		{"localhost on another port", open, "127.0.0.1:PORT", "http://localhost:3000", "POST", admin.ResetPath, 403, "ORIGIN_NOT_ALLOWED", "localhost:3000"},
		{"a sandboxed page", open, "127.0.0.1:PORT", "null", "POST", admin.ResetPath, 403, "ORIGIN_NOT_ALLOWED", "null"},
		{"a site, to an unknown path", open, "127.0.0.1:PORT", "https://attacker.example", "POST", "/admin/v1/nope", 403, "ORIGIN_NOT_ALLOWED", ""},
		{"a listed name", named, "127.0.0.1:PORT", "https://dashboard.example.com", "POST", admin.ResetPath, 200, "", ""},
		{"a name beside a listed one", named, "127.0.0.1:PORT", "https://dashboard.example.com.attacker.example", "POST", admin.ResetPath, 403, "ORIGIN_NOT_ALLOWED", "dashboard.example.com"},
		{"any origin under *", anyOrigin, "127.0.0.1:PORT", "https://attacker.example", "POST", admin.ResetPath, 200, "", ""},
		{"a read from a site", open, "127.0.0.1:PORT", "https://attacker.example", "GET", admin.TopPath, 200, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.d.f.check(t, "login", "192.0.2.1", 2) // spent: a reset gives it back
			a := c.d.do(t, req{method: c.method, path: c.path, host: c.host, origin: c.origin, auth: bearer, body: `{"rule":"login","key":"192.0.2.1"}`})
			if a.code != c.want || a.err.Code != c.code || !strings.Contains(a.err.Message, c.messages) {
				t.Fatalf("%s %s from Origin %q: %d %s, want %d %s", c.method, c.path, c.origin, a.code, a.body, c.want, c.code)
			}
			in, err := c.d.f.engine.Inspect(context.Background(), policy.Check{Rule: "login", Key: "192.0.2.1"})
			if err != nil {
				t.Fatal(err)
			}
			if reset := in.Allowed; reset != (c.want == 200 && c.path == admin.ResetPath) {
				t.Errorf("after the %d: the key's quota reset %v", a.code, reset)
			}
		})
	}
}

// TestTokenFailures: after FailuresPerAddress wrong tokens from one
// address, every request that needs the token is answered 429 with
// Retry-After and the RATE_LIMITED body, the right token too, until
// exactly the GCRA's interval has passed; right tokens and requests
// without one consume nothing; another address is not held back.
func TestTokenFailures(t *testing.T) {
	d := newDoor(t)
	reset := func(auth, from string) answer {
		return d.do(t, req{method: "POST", path: admin.ResetPath, auth: auth, from: from, body: `{"rule":"login","key":"192.0.2.1"}`})
	}
	right, wrong := "Bearer "+doorToken, "Bearer guess"
	for i := range 20 { // no token at all: not an attempt
		if a := reset("", ""); a.code != 401 {
			t.Fatalf("without a token, %d: %d %s", i, a.code, a.body)
		}
	}
	for i := range 20 { // the right token: consumes nothing
		if a := reset(right, ""); a.code != 200 {
			t.Fatalf("the right token, %d: %d %s", i, a.code, a.body)
		}
	}
	for i := range admin.FailuresPerAddress {
		a := reset(wrong, "")
		if want := fmt.Sprintf("(%d more wrong ones", admin.FailuresPerAddress-1-i); a.code != 401 || !strings.Contains(a.err.Message, want) {
			t.Fatalf("wrong token %d: %d %s, want 401 saying %s", i+1, a.code, a.body, want)
		}
	}
	interval := admin.FailurePeriod / admin.FailuresPerAddress // 12s
	for _, auth := range []string{right, wrong, "Basic " + doorToken} {
		a := reset(auth, "")
		if a.code != 429 || a.header.Get("Retry-After") != "12" || a.err.Code != "RATE_LIMITED" || a.err.RetryAfter != 12 || !strings.Contains(a.err.Message, "this address (5 per 1m0s)") {
			t.Errorf("%q after %d wrong tokens: %d %v %s, want 429, Retry-After 12, RATE_LIMITED", auth, admin.FailuresPerAddress, a.code, a.header, a.body)
		}
	}
	if a := reset("", ""); a.code != 401 {
		t.Errorf("without a token while limited: %d, want 401 (it guesses nothing)", a.code)
	}
	if a := reset(right, "127.0.0.2"); a.code != 200 {
		t.Errorf("the right token from another address: %d %s, want 200", a.code, a.body)
	}
	if a := reset(wrong, "127.0.0.2"); a.code != 401 {
		t.Errorf("a wrong token from another address: %d %s, want 401", a.code, a.body)
	}
	d.advance(interval - time.Microsecond)
	if a := reset(right, ""); a.code != 429 || a.header.Get("Retry-After") != "1" {
		t.Errorf("the right token a microsecond early: %d Retry-After %q, want 429 and 1", a.code, a.header.Get("Retry-After"))
	}
	d.advance(time.Microsecond)
	if a := reset(right, ""); a.code != 200 {
		t.Errorf("the right token once the interval passed: %d %s, want 200", a.code, a.body)
	}
	if a := reset(wrong, ""); a.code != 401 {
		t.Errorf("a wrong token once the interval passed: %d, want 401 (one more admitted)", a.code)
	}
	if a := reset(right, ""); a.code != 429 {
		t.Errorf("the right token after that one: %d, want 429", a.code)
	}
	// Each refusal is logged at Warn, the address masked; the 429s once
	// per address.
	var wrongs, limited int
	for _, l := range d.logs() {
		switch l["msg"] {
		case "sluice: admin request refused: a wrong bearer token":
			wrongs++
		case "sluice: admin request refused: too many wrong bearer tokens":
			limited++
			if l["limit"] != "admin-token-address" {
				t.Errorf("429 logged as %v", l)
			}
		default:
			continue
		}
		if l["level"] != "WARN" || l["remote"] != policy.MaskKey("127.0.0.1") && l["remote"] != policy.MaskKey("127.0.0.2") {
			t.Errorf("refusal logged as %v, want WARN with the address masked", l)
		}
	}
	if wrongs != admin.FailuresPerAddress+2 || limited != 1 {
		t.Errorf("%d wrong tokens and %d 429s logged, want %d and 1 (one 429 line per address and period)", wrongs, limited, admin.FailuresPerAddress+2)
	}
}

// TestTokenFailuresTotal: wrong tokens from many addresses are held to
// FailuresTotal together: then a fresh address's right token is refused
// too, with a 429 naming the total.
func TestTokenFailuresTotal(t *testing.T) {
	d := newDoor(t)
	n := 0
	for host := 2; n < admin.FailuresTotal; host++ {
		from := fmt.Sprintf("127.0.0.%d", host)
		for range admin.FailuresPerAddress {
			if a := d.do(t, req{method: "POST", path: admin.ResetPath, auth: "Bearer guess", from: from, body: "{}"}); a.code != 401 {
				t.Fatalf("wrong token %d, from %s: %d %s", n+1, from, a.code, a.body)
			}
			n++
		}
	}
	a := d.do(t, req{method: "POST", path: admin.ResetPath, auth: "Bearer " + doorToken, from: "127.0.0.100", body: `{"rule":"login","key":"k"}`})
	if a.code != 429 || !strings.Contains(a.err.Message, fmt.Sprintf("all addresses together (%d per 1m0s)", admin.FailuresTotal)) || a.header.Get("Retry-After") != "2" {
		t.Errorf("the right token from a fresh address after %d wrong ones: %d %v %s, want 429 naming the total, Retry-After 2", n, a.code, a.header, a.body)
	}
}

// TestTokenGuessesAtOnce: of guesses sent at once from one address,
// exactly FailuresPerAddress are answered 401, and every other 429.
func TestTokenGuessesAtOnce(t *testing.T) {
	d := newDoor(t)
	const guesses = 40
	var codes sync.Map
	var wg sync.WaitGroup
	for i := range guesses {
		wg.Go(func() {
			a := d.do(t, req{method: "POST", path: admin.ResetPath, auth: fmt.Sprintf("Bearer guess-%d", i), body: "{}"})
			n, _ := codes.LoadOrStore(a.code, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
		})
	}
	wg.Wait()
	got := map[any]int32{}
	codes.Range(func(k, v any) bool { got[k] = v.(*atomic.Int32).Load(); return true })
	if len(got) != 2 || got[401] != admin.FailuresPerAddress || got[429] != guesses-admin.FailuresPerAddress {
		t.Errorf("%d guesses at once answered %v, want %d 401s and the rest 429", guesses, got, admin.FailuresPerAddress)
	}
}

// TestAuthAll: under AuthAll the endpoints with data need the token, and
// wrong ones count as for a reset; the page and its files do not, so
// that it can ask for it. Under AuthWrites (the control) they are open.
// AuthAll without a token refuses them with 403.
func TestAuthAll(t *testing.T) {
	all, writes := newDoor(t, admin.WithAuth(admin.AuthAll)), newDoor(t)
	unset := newDoor(t, admin.WithAuth(admin.AuthAll), admin.WithToken(""))
	bearer := "Bearer " + doorToken
	data := []string{admin.StatsPath, admin.TopPath, admin.InspectPath + "?rule=login&key=192.0.2.1"}
	files := []string{"/", admin.AssetsPrefix + "app.js", admin.AssetsPrefix + "style.css", admin.AssetsPrefix + "favicon.svg"}
	for _, path := range data {
		if a := all.do(t, req{method: "GET", path: path}); a.code != 401 || a.err.Code != "UNAUTHORIZED" || a.header.Get("WWW-Authenticate") == "" {
			t.Errorf("all: GET %s without the token: %d %s, want 401", path, a.code, a.body)
		}
		if a := all.do(t, req{method: "GET", path: path, auth: bearer}); a.code != 200 {
			t.Errorf("all: GET %s with the token: %d %.200s", path, a.code, a.body)
		}
		if a := writes.do(t, req{method: "GET", path: path}); a.code != 200 {
			t.Errorf("writes: GET %s without the token: %d %.200s", path, a.code, a.body)
		}
		if a := unset.do(t, req{method: "GET", path: path, auth: bearer}); a.code != 403 || a.err.Code != "TOKEN_UNSET" || !strings.Contains(a.err.Message, admin.TokenEnv) {
			t.Errorf("all without a token: GET %s: %d %s, want 403 naming %s", path, a.code, a.body, admin.TokenEnv)
		}
	}
	for _, path := range files {
		if a := all.do(t, req{method: "GET", path: path}); a.code != 200 {
			t.Errorf("all: GET %s without the token: %d, want the file", path, a.code)
		}
	}
	for range admin.FailuresPerAddress {
		all.do(t, req{method: "GET", path: admin.StatsPath, auth: "Bearer guess"})
	}
	if a := all.do(t, req{method: "GET", path: admin.TopPath, auth: bearer}); a.code != 429 {
		t.Errorf("all: the right token after %d wrong ones on stats: %d, want 429", admin.FailuresPerAddress, a.code)
	}
}

func TestParseHosts(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{"", "", ""},
		{" sluice.internal , ,Dashboard.Example.COM.", "dashboard.example.com,sluice.internal", ""},
		{"a.example,a.example", "a.example", ""},
		{"*", "*", ""},
		{"10.0.0.1,[::1],::1,b.example", "b.example", ""},
		{"host_with_underscore.local", "host_with_underscore.local", ""},
		{"sluice.internal:8083", "", `host "sluice.internal:8083": list names without a port`},
		{"http://sluice.internal", "", "not URLs"},
		{"sluice.internal/admin", "", "without a path"},
		{"*.example.com", "", `"*" alone allows every host`},
		{"a..b", "", "1 to 63 characters"},
		{"bad name", "", `' ' is not a letter`},
		{"[sluice]", "", "not an IPv6 address in brackets"},
		{strings.Repeat("a", 64) + ".example", "", "1 to 63 characters"},
	} {
		hs, err := admin.ParseHosts(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseHosts(%q): %v, want an error saying %s", c.in, err, c.err)
			}
			continue
		}
		if err != nil || hs.String() != c.want {
			t.Errorf("ParseHosts(%q) = %q, %v; want %q", c.in, hs.String(), err, c.want)
		}
	}
	hs, _ := admin.ParseHosts("b.example")
	if got := hs.With("A.example").With("127.0.0.1").With("").With("b.example").String(); got != "a.example,b.example" {
		t.Errorf("With: %q", got)
	}
}

func TestParseAuth(t *testing.T) {
	for _, a := range []admin.Auth{admin.AuthWrites, admin.AuthAll} {
		if got, err := admin.ParseAuth(a.String()); err != nil || got != a {
			t.Errorf("ParseAuth(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := admin.ParseAuth("reads"); err == nil || !strings.Contains(err.Error(), `"reads" is not writes`) {
		t.Errorf("ParseAuth(reads): %v", err)
	}
}
