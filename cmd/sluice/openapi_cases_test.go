//go:build integration

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sluice-go/sluice/internal/service/admin"
)

// The tokens of the servers TestOpenAPI starts.
const (
	tokenMain  = "main-token"
	tokenDown  = "down-token"
	tokenEnvoy = "envoy-token"
)

// apiCase is one request to a running sluice serve and the answer the
// test wants.
type apiCase struct {
	name   string
	method string
	target string // path and query
	header map[string]string
	body   string
	// status is the answer's status; code the error code of a JSON
	// error answer.
	status int
	code   string
	// invalid says that the request breaks the document (the server
	// refuses it too): the document's request schemas are as strict as
	// the server.
	invalid bool
	// without lists the headers the document has for the answer that
	// this one lacks, rightly (a degraded answer has no rate-limit
	// headers); every other documented header must be there.
	without []string
}

// apiRun runs cases against servers, checks each answer against the
// document, and records which documented answers were seen.
type apiRun struct {
	doc    *openapi3.T
	client *http.Client
	seen   map[string]map[int]bool // by "METHOD /path", the statuses answered
	kept   map[string]*exchange    // the exchanges of some cases, by name, for the control
}

func newAPIRun(doc *openapi3.T) *apiRun {
	return &apiRun{doc: doc, client: &http.Client{Timeout: 30 * time.Second},
		seen: map[string]map[int]bool{}, kept: map[string]*exchange{}}
}

// send sends c to d and returns the exchange.
func (r *apiRun) send(t *testing.T, d *daemon, c apiCase) *exchange {
	t.Helper()
	u, err := url.Parse(c.target)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(c.method, d.base+c.target, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", c.name, err)
	}
	return &exchange{method: c.method, path: u.Path, query: u.RawQuery, header: req.Header,
		reqBody: []byte(c.body), status: resp.StatusCode, respHeader: resp.Header, body: body}
}

// check checks x, the exchange of c, against c and the document.
func (r *apiRun) check(t *testing.T, c apiCase, x *exchange) {
	t.Helper()
	what := fmt.Sprintf("%s (%s %s)", c.name, x.method, x.path)
	t.Logf("%s: %d %s\n%.400s", what, x.status, shownHeaders(x.respHeader), x.body)
	if x.status != c.status {
		t.Errorf("%s: %d %.300s, want %d", what, x.status, x.body, c.status)
		return
	}
	if err := validateRequest(r.doc, x); c.invalid != (err != nil) {
		t.Errorf("%s: the request breaks the document: %v, want %v (%v)", what, err != nil, c.invalid, err)
	}
	rt, err := specRoute(r.doc, x.method, x.path)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if err := validateResponse(rt, x); err != nil {
		t.Errorf("%s: the answer does not match the document: %v\n%s", what, err, x.body)
	}
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	isError := strings.HasPrefix(x.respHeader.Get("Content-Type"), "application/json") && json.Unmarshal(x.body, &e) == nil && e.Error.Code != ""
	if isError || c.code != "" {
		if e.Error.Code != c.code {
			t.Errorf("%s: error code %q, want %q: %s", what, e.Error.Code, c.code, x.body)
		}
	}
	// The headers the document has for this answer are there, but those
	// the case says it lacks, which are not.
	resp := rt.Operation.Responses.Status(x.status)
	if resp == nil {
		return // undocumented: the validation said so
	}
	for name := range resp.Value.Headers {
		got := x.respHeader.Get(name) != ""
		if want := !slices.Contains(c.without, name); got != want {
			t.Errorf("%s: header %s present %v, want %v", what, name, got, want)
		}
	}
	for _, name := range c.without {
		if _, ok := resp.Value.Headers[name]; !ok {
			t.Errorf("%s: the case says the answer lacks %s, which the document does not have for it", what, name)
		}
	}
	key := x.method + " " + x.path
	if r.seen[key] == nil {
		r.seen[key] = map[int]bool{}
	}
	r.seen[key][x.status] = true
}

// shownHeaders returns the header fields of h that the document
// describes, as they would be written, for the log.
func shownHeaders(h http.Header) string {
	var b strings.Builder
	for _, k := range []string{"Retry-After", "RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Allow", "WWW-Authenticate"} {
		if v := h.Get(k); v != "" {
			fmt.Fprintf(&b, "\n%s: %s", k, v)
		}
	}
	return b.String()
}

// run sends each case to d and checks its answer, in order.
func (r *apiRun) run(t *testing.T, d *daemon, cases []apiCase) {
	t.Helper()
	for _, c := range cases {
		x := r.send(t, d, c)
		r.check(t, c, x)
		r.kept[c.name] = x
	}
}

// hold opens a connection to d and sends a POST of path whose body never
// arrives whole, holding one request in flight until the connection is
// closed or the server's body timeout ends it.
func hold(t *testing.T, d *daemon, path, partial string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, len(partial)+100, partial)
	return conn
}

// runTimeout holds a request of c's path until the server's body timeout
// answers it, and checks that answer as c's.
func (r *apiRun) runTimeout(t *testing.T, d *daemon, c apiCase) {
	t.Helper()
	conn := hold(t, d, c.target, c.body)
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: c.method})
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.check(t, c, &exchange{method: c.method, path: c.target, header: http.Header{"Content-Type": {"application/json"}},
		reqBody: []byte(c.body), status: resp.StatusCode, respHeader: resp.Header, body: body})
}

// runBusy sends c to d, a server of --max-inflight 1, while another
// request is held in flight, and checks the 503 SERVER_BUSY it gets. The
// held request's headers may reach the server after c: then c is served,
// and the test tries again.
func (r *apiRun) runBusy(t *testing.T, d *daemon, c apiCase) {
	t.Helper()
	for range 20 {
		conn := hold(t, d, "/v1/check", `{"rule"`)
		x := r.send(t, d, c)
		conn.Close()
		// Until the held request has seen its connection close and left.
		waitUntil(t, 10*time.Second, func() error {
			if x := r.send(t, d, apiCase{method: "GET", target: "/admin/ui/favicon.svg"}); x.status != 200 {
				return fmt.Errorf("the favicon: %d", x.status)
			}
			return nil
		})
		if x.status == http.StatusServiceUnavailable && bytes.Contains(x.body, []byte("SERVER_BUSY")) {
			r.check(t, c, x)
			return
		}
	}
	t.Errorf("%s: never answered 503 SERVER_BUSY while another request was in flight", c.name)
}

// Policy files of the servers.
const (
	// openAPIRules is the main server's: a rule per key source and
	// algorithm family, one of several limits, one in shadow mode, and
	// two that settle (brief's reservations expire within a second), and
	// one slot a key (jobs, whose leases end within a second).
	openAPIRules = `
rules:
  - {name: search, match: GET /api/search, key: header:X-API-Key, algorithm: token_bucket, limit: 5, period: 1s, burst: 2}
  - name: login
    match: POST /api/auth/login
    key: ip
    limits:
      - {algorithm: sliding_window, limit: 2, period: 1m}
      - {algorithm: fixed_window, limit: 20, period: 1h}
  - {name: export, match: GET /api/export, key: header:X-API-Key, limit: 1, period: 1m, shadow: true}
  - {name: tokens, key: request, algorithm: fixed_window, limit: 100000, period: 1m, settle: {cost_from: "header:X-Tokens-Used", reserve: 4096}}
  - {name: brief, key: request, algorithm: fixed_window, limit: 100, period: 1s, settle: {cost_from: bytes, reserve: 10}}
  - {name: jobs, key: request, algorithm: concurrency, limit: 1, ttl: 1s}
  - {name: checkout, key: request, algorithm: token_bucket, limit: 10, period: 1h, priority: {reserve: {critical: 20%}}}
`
	// openAPIDownRules is the server's whose Redis is down: deny by
	// default, allow and the local fallback for a rule each.
	openAPIDownRules = `
redis:
  on_error: deny
rules:
  - {name: login, match: /login, key: ip, limit: 2, period: 1m}
  - {name: open, match: /open, key: ip, limit: 2, period: 1m, on_error: allow}
  - {name: near, match: /near, key: ip, limit: 2, period: 1m, on_error: local}
`
	// openAPIEnvoyConfig is an envoyproxy/ratelimit config, which has
	// no rules for inspect and reset to name.
	openAPIEnvoyConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
`
)

// loginCheck is a check of the main server's login rule for one address.
const loginCheck = `{"rule":"login","key":"203.0.113.7"}`

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// bearer is the header of token.
func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// addHeader returns h with k: v added.
func addHeader(h map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for hk, hv := range h {
		out[hk] = hv
	}
	return out
}

// noRateLimit are the rate-limit headers, which degraded answers lack.
var noRateLimit = []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// TestOpenAPI runs good and bad requests of every operation of the
// document against running servers (the main one on the memory store,
// one whose Redis is down, one with an envoyproxy/ratelimit config, one
// without the admin token) and checks every answer against the document:
// a documented status, a body of the documented schema, the documented
// headers. Every documented status of every operation must be seen.
func TestOpenAPI(t *testing.T) {
	r := newAPIRun(loadSpec(t))
	r.mainServer(t)
	r.downServer(t)
	r.envoyServer(t)
	r.resetsOff(t)
	r.covered(t)
	t.Run("control", func(t *testing.T) { r.control(t) })
}

// mainServer runs the cases of the main server: the memory store, resets
// on.
func (r *apiRun) mainServer(t *testing.T) {
	main := startServe(t, []string{admin.TokenEnv + "=" + tokenMain}, "--config", writeFile(t, openAPIRules))
	r.run(t, main, []apiCase{
		{name: "check admitted", method: "POST", target: "/v1/check", body: loginCheck, status: 200},
		{name: "check admitted, the last", method: "POST", target: "/v1/check", body: loginCheck, status: 200},
		{name: "check denied", method: "POST", target: "/v1/check", body: loginCheck, status: 429},
		{name: "check shadow", method: "POST", target: "/v1/check", body: `{"rule":"export","key":"k1"}`, status: 200},
		{name: "check shadow denied", method: "POST", target: "/v1/check", body: `{"rule":"export","key":"k1"}`, status: 200},
		{name: "check cost 0", method: "POST", target: "/v1/check", body: `{"rule":"search","key":"k1","cost":0}`, status: 200},
		{name: "check the lowest class's share", method: "POST", target: "/v1/check", body: `{"rule":"checkout","key":"c1","cost":8}`, status: 200},
		{name: "check shed", method: "POST", target: "/v1/check", body: `{"rule":"checkout","key":"c1","class":"bulk"}`, status: 429},
		{name: "check critical", method: "POST", target: "/v1/check", body: `{"rule":"checkout","key":"c1","class":"critical"}`, status: 200},
		{name: "check class not a string", method: "POST", target: "/v1/check", body: `{"rule":"checkout","key":"c1","class":1}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "batch shed", method: "POST", target: "/v1/check/batch", body: `{"checks":[{"rule":"checkout","key":"c1"},{"rule":"search","key":"c1","class":"critical"}]}`, status: 200},
		{name: "check unknown rule", method: "POST", target: "/v1/check", body: `{"rule":"nope","key":"k"}`, status: 400, code: "BAD_REQUEST"},
		{name: "check no rule", method: "POST", target: "/v1/check", body: `{"key":"k"}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "check malformed", method: "POST", target: "/v1/check", body: `{"rule":"login",`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "check unknown field", method: "POST", target: "/v1/check", body: `{"rule":"login","key":"192.0.2.1","colour":1}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "check negative cost", method: "POST", target: "/v1/check", body: `{"rule":"login","key":"192.0.2.1","cost":-1}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "check impossible cost", method: "POST", target: "/v1/check", body: `{"rule":"login","key":"192.0.2.1","cost":1000}`, status: 400, code: "BAD_REQUEST"},
		{name: "check not an IP", method: "POST", target: "/v1/check", body: `{"rule":"login","key":"abc"}`, status: 400, code: "BAD_REQUEST"},
		{name: "check not UTF-8", method: "POST", target: "/v1/check", body: "{\"rule\":\"search\",\"key\":\"\xff\"}", status: 400, code: "BAD_REQUEST"},
		// Valid to kin-openapi, which decodes the first JSON value only.
		{name: "check data after", method: "POST", target: "/v1/check", body: loginCheck + ` {}`, status: 400, code: "BAD_REQUEST"},
		{name: "check too large", method: "POST", target: "/v1/check", body: `{"rule":"search","key":"` + strings.Repeat("k", 65<<10) + `"}`, status: 413, code: "TOO_LARGE"},
		{name: "check text", method: "POST", target: "/v1/check", header: map[string]string{"Content-Type": "text/plain"}, body: loginCheck, status: 415, code: "UNSUPPORTED_MEDIA_TYPE", invalid: true},

		{name: "batch admitted", method: "POST", target: "/v1/check/batch", body: `{"checks":[{"rule":"search","key":"k2"},{"rule":"export","key":"k2","cost":1}]}`, status: 200},
		{name: "batch denied", method: "POST", target: "/v1/check/batch", body: `{"checks":[{"rule":"login","key":"203.0.113.7"},{"rule":"export","key":"k3"}]}`, status: 200},
		{name: "batch empty", method: "POST", target: "/v1/check/batch", body: `{"checks":[]}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "batch of 101", method: "POST", target: "/v1/check/batch", body: `{"checks":[` + strings.Repeat(`{"rule":"search","key":"k"},`, 100) + `{"rule":"search","key":"k"}]}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "batch repeated", method: "POST", target: "/v1/check/batch", body: `{"checks":[{"rule":"search","key":"a"},{"rule":"search","key":"a"}]}`, status: 400, code: "BAD_REQUEST"},
		{name: "batch bad check", method: "POST", target: "/v1/check/batch", body: `{"checks":[{"rule":"search","key":"a"},{"rule":"login","key":"a"}]}`, status: 400, code: "BAD_REQUEST"},
		{name: "batch too large", method: "POST", target: "/v1/check/batch", body: `{"checks":[{"rule":"search","key":"` + strings.Repeat("k", 65<<10) + `"}]}`, status: 413, code: "TOO_LARGE"},
		{name: "batch text", method: "POST", target: "/v1/check/batch", header: map[string]string{"Content-Type": "text/plain"}, body: `{"checks":[{"rule":"search","key":"a"}]}`, status: 415, code: "UNSUPPORTED_MEDIA_TYPE", invalid: true},

		{name: "healthz", method: "GET", target: "/healthz", status: 200},
		{name: "readyz", method: "GET", target: "/readyz", status: 200},
		{name: "metrics", method: "GET", target: "/metrics", status: 200},
		{name: "healthcheck", method: "GET", target: "/healthcheck", status: 200},

		{name: "json admitted", method: "POST", target: "/json", body: `{"domain":"edge","descriptors":[{"entries":[{"key":"rule","value":"login"},{"key":"remote_address","value":"198.51.100.1"}]}]}`, status: 200},
		{name: "json over the limit", method: "POST", target: "/json", body: `{"domain":"edge","descriptors":[{"entries":[{"key":"rule","value":"login"},{"key":"remote_address","value":"203.0.113.7"}]}]}`, status: 429},
		{name: "json unknown rule", method: "POST", target: "/json", body: `{"domain":"edge","descriptors":[{"entries":[{"key":"rule","value":"nope"}]}]}`, status: 400},
		{name: "json malformed", method: "POST", target: "/json", body: `{"domain":"edge"`, status: 400, invalid: true},
		{name: "json too large", method: "POST", target: "/json", body: `{"domain":"` + strings.Repeat("d", 1<<20) + `","descriptors":[]}`, status: 413},

		{name: "page", method: "GET", target: "/", status: 200},
		{name: "script", method: "GET", target: "/admin/ui/app.js", status: 200},
		{name: "style", method: "GET", target: "/admin/ui/style.css", status: 200},
		{name: "icon", method: "GET", target: "/admin/ui/favicon.svg", status: 200},
		{name: "stats", method: "GET", target: "/admin/v1/stats?window=2&n=2", status: 200},
		{name: "stats window 0", method: "GET", target: "/admin/v1/stats?window=0", status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "top", method: "GET", target: "/admin/v1/top?n=5", status: 200},
		{name: "top n not a number", method: "GET", target: "/admin/v1/top?n=many", status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "inspect", method: "GET", target: "/admin/v1/inspect?rule=login&key=203.0.113.7", status: 200},
		{name: "inspect cost 0", method: "GET", target: "/admin/v1/inspect?rule=search&key=k1&cost=0", status: 200},
		{name: "inspect no rule", method: "GET", target: "/admin/v1/inspect?key=203.0.113.7", status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "inspect bad cost", method: "GET", target: "/admin/v1/inspect?rule=login&key=203.0.113.7&cost=x", status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "inspect unknown rule", method: "GET", target: "/admin/v1/inspect?rule=nope&key=k", status: 400, code: "BAD_REQUEST"},
		{name: "reset", method: "POST", target: "/admin/v1/reset", header: bearer(tokenMain), body: loginCheck, status: 200},
		{name: "check admitted after the reset", method: "POST", target: "/v1/check", body: loginCheck, status: 200},
		{name: "reset no rule", method: "POST", target: "/admin/v1/reset", header: bearer(tokenMain), body: `{"key":"k"}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "reset unknown field", method: "POST", target: "/admin/v1/reset", header: bearer(tokenMain), body: `{"rule":"login","key":"192.0.2.1","all":true}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "reset too large", method: "POST", target: "/admin/v1/reset", header: bearer(tokenMain), body: `{"rule":"search","key":"` + strings.Repeat("k", 65<<10) + `"}`, status: 413, code: "TOO_LARGE"},
		{name: "reset no token", method: "POST", target: "/admin/v1/reset", body: loginCheck, status: 401, code: "UNAUTHORIZED", invalid: true},
		{name: "reset from another site", method: "POST", target: "/admin/v1/reset", header: addHeader(bearer(tokenMain), "Origin", "http://evil.example"), body: loginCheck, status: 403, code: "ORIGIN_NOT_ALLOWED"},
	})
	// Every endpoint of the admin door refuses a Host of another name.
	var rebinding []apiCase
	for _, target := range []string{"/", "/admin/ui/app.js", "/admin/ui/style.css", "/admin/ui/favicon.svg", "/admin/v1/stats", "/admin/v1/top", "/admin/v1/inspect?rule=login&key=203.0.113.7"} {
		rebinding = append(rebinding, apiCase{name: "rebinding " + target, method: "GET", target: target, header: map[string]string{"Host": "evil.example"}, status: 421, code: "HOST_NOT_ALLOWED"})
	}
	rebinding = append(rebinding, apiCase{name: "rebinding reset", method: "POST", target: "/admin/v1/reset", header: addHeader(bearer(tokenMain), "Host", "evil.example"), body: loginCheck, status: 421, code: "HOST_NOT_ALLOWED"})
	r.run(t, main, rebinding)
	r.settleCases(t, main)
	r.methodsAndPaths(t, main)
}

// reservation returns the reservation that the answer of the case name
// holds.
func (r *apiRun) reservation(t *testing.T, name string) string {
	t.Helper()
	var body struct {
		Reservation string `json:"reservation"`
	}
	x := r.kept[name]
	if x == nil || json.Unmarshal(x.body, &body) != nil || body.Reservation == "" {
		t.Fatalf("%s: no reservation in the answer", name)
	}
	return body.Reservation
}

// wantStatuses checks the statuses of the results of the settle batch
// the case name sent, if it was answered 200 (else the case failed).
func (r *apiRun) wantStatuses(t *testing.T, name string, want ...int) {
	t.Helper()
	x := r.kept[name]
	if x == nil || x.status != 200 {
		return
	}
	var body struct {
		Results []struct {
			Status int `json:"status"`
		} `json:"results"`
	}
	if err := json.Unmarshal(x.body, &body); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var got []int
	for _, res := range body.Results {
		got = append(got, res.Status)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: statuses %v, want %v: %s", name, got, want, x.body)
	}
}

// settleCases runs the cases of POST /v1/settle and its batch on d, the
// main server: checks under the rules that settle answer reservations,
// which the settles that follow take.
func (r *apiRun) settleCases(t *testing.T, d *daemon) {
	t.Helper()
	r.run(t, d, []apiCase{
		{name: "check reserving, brief", method: "POST", target: "/v1/check", body: `{"rule":"brief","key":"t1"}`, status: 200},
		{name: "check reserving", method: "POST", target: "/v1/check", body: `{"rule":"tokens","key":"t1"}`, status: 200},
		{name: "batch reserving", method: "POST", target: "/v1/check/batch", body: `{"checks":[{"rule":"tokens","key":"t2"},{"rule":"search","key":"t2"}]}`, status: 200},
		{name: "acquire, lapsing", method: "POST", target: "/v1/check", body: `{"rule":"jobs","key":"j1"}`, status: 200},
		{name: "acquire", method: "POST", target: "/v1/check", body: `{"rule":"jobs","key":"j2"}`, status: 200},
		{name: "acquire, full", method: "POST", target: "/v1/check", body: `{"rule":"jobs","key":"j2"}`, status: 429},
	})
	lapsing, job := r.reservation(t, "acquire, lapsing"), r.reservation(t, "acquire")
	leaseOf := func(reservation string) string { return fmt.Sprintf(`{"reservation":%q}`, reservation) }
	r.run(t, d, []apiCase{
		{name: "renew", method: "POST", target: "/v1/renew", body: leaseOf(job), status: 200},
		{name: "renew replaced", method: "POST", target: "/v1/renew", body: leaseOf(job), status: 409, code: "ALREADY_SETTLED"},
	})
	renewed := r.reservation(t, "renew")
	r.run(t, d, []apiCase{
		{name: "release", method: "POST", target: "/v1/release", body: leaseOf(renewed), status: 200},
		{name: "release again", method: "POST", target: "/v1/release", body: leaseOf(renewed), status: 409, code: "ALREADY_SETTLED"},
		{name: "release invalid reservation", method: "POST", target: "/v1/release", body: leaseOf("not-one"), status: 400, code: "INVALID_RESERVATION"},
		{name: "renew no reservation", method: "POST", target: "/v1/renew", body: `{}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "release unknown field", method: "POST", target: "/v1/release", body: `{"reservation":"x","cost":1}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "renew too large", method: "POST", target: "/v1/renew", body: `{"reservation":"` + strings.Repeat("k", 65<<10) + `"}`, status: 413, code: "TOO_LARGE"},
		{name: "release too large", method: "POST", target: "/v1/release", body: `{"reservation":"` + strings.Repeat("k", 65<<10) + `"}`, status: 413, code: "TOO_LARGE"},
		{name: "renew text", method: "POST", target: "/v1/renew", header: map[string]string{"Content-Type": "text/plain"}, body: leaseOf("x"), status: 415, code: "UNSUPPORTED_MEDIA_TYPE", invalid: true},
		{name: "release text", method: "POST", target: "/v1/release", header: map[string]string{"Content-Type": "text/plain"}, body: leaseOf("x"), status: 415, code: "UNSUPPORTED_MEDIA_TYPE", invalid: true},
	})
	// brief's reservation expires a second after its take, which came
	// before its answer.
	expires := time.Now().Add(time.Second)
	id, brief, batch := r.reservation(t, "check reserving"), r.reservation(t, "check reserving, brief"), r.reservation(t, "batch reserving")
	settleOf := func(reservation string, cost int) string {
		return fmt.Sprintf(`{"reservation":%q,"cost":%d}`, reservation, cost)
	}
	r.run(t, d, []apiCase{
		{name: "settle", method: "POST", target: "/v1/settle", body: settleOf(id, 1234), status: 200},
		{name: "settle again", method: "POST", target: "/v1/settle", body: settleOf(id, 0), status: 409, code: "ALREADY_SETTLED"},
		{name: "settle by rule and key", method: "POST", target: "/v1/settle", body: `{"rule":"tokens","key":"t1","cost":1000}`, status: 200},
		{name: "settle by rule and key, the rule's cost", method: "POST", target: "/v1/settle", body: `{"rule":"login","key":"203.0.113.7"}`, status: 200},
		{name: "settle invalid reservation", method: "POST", target: "/v1/settle", body: settleOf("not-one", 1), status: 400, code: "INVALID_RESERVATION"},
		{name: "settle no cost", method: "POST", target: "/v1/settle", body: fmt.Sprintf(`{"reservation":%q}`, brief), status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "settle both", method: "POST", target: "/v1/settle", body: `{"reservation":"x","rule":"tokens","key":"t1","cost":1}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "settle neither", method: "POST", target: "/v1/settle", body: `{"cost":1}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "settle negative cost", method: "POST", target: "/v1/settle", body: `{"rule":"tokens","key":"t1","cost":-1}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "settle unknown rule", method: "POST", target: "/v1/settle", body: `{"rule":"nope","key":"t1","cost":1}`, status: 400, code: "BAD_REQUEST"},
		{name: "settle no key", method: "POST", target: "/v1/settle", body: `{"rule":"tokens","cost":1}`, status: 400, code: "BAD_REQUEST"},
		{name: "settle unknown field", method: "POST", target: "/v1/settle", body: `{"reservaton":"x","cost":1}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "settle malformed", method: "POST", target: "/v1/settle", body: `{"reservation":`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "settle too large", method: "POST", target: "/v1/settle", body: `{"rule":"tokens","key":"` + strings.Repeat("k", 65<<10) + `"}`, status: 413, code: "TOO_LARGE"},
		{name: "settle text", method: "POST", target: "/v1/settle", header: map[string]string{"Content-Type": "text/plain"}, body: `{"rule":"tokens","key":"t1","cost":1}`, status: 415, code: "UNSUPPORTED_MEDIA_TYPE", invalid: true},

		{name: "settle batch", method: "POST", target: "/v1/settle/batch", status: 200,
			body: fmt.Sprintf(`{"settles":[%s,%s,%s,{"rule":"tokens","key":"t2","cost":100}]}`, settleOf(batch, 100), settleOf(batch, 1), settleOf("not-one", 1))},
		{name: "settle batch empty", method: "POST", target: "/v1/settle/batch", body: `{"settles":[]}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "settle batch of 101", method: "POST", target: "/v1/settle/batch", body: `{"settles":[` + strings.Repeat(`{"rule":"tokens","key":"t1","cost":1},`, 100) + `{"rule":"tokens","key":"t1","cost":1}]}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "settle batch unknown field", method: "POST", target: "/v1/settle/batch", body: `{"settles":[{"rule":"tokens","key":"t1","cost":1}],"all":true}`, status: 400, code: "BAD_REQUEST", invalid: true},
		{name: "settle batch too large", method: "POST", target: "/v1/settle/batch", body: `{"settles":[{"rule":"tokens","key":"` + strings.Repeat("k", 65<<10) + `"}]}`, status: 413, code: "TOO_LARGE"},
		{name: "settle batch text", method: "POST", target: "/v1/settle/batch", header: map[string]string{"Content-Type": "text/plain"}, body: `{"settles":[{"rule":"tokens","key":"t1","cost":1}]}`, status: 415, code: "UNSUPPORTED_MEDIA_TYPE", invalid: true},
	})
	// Each settle of the batch stands alone: the reservation settles
	// once, the one not issued fails, the refund is made.
	r.wantStatuses(t, "settle batch", 200, 409, 400, 200)
	time.Sleep(time.Until(expires.Add(100 * time.Millisecond)))
	r.run(t, d, []apiCase{
		{name: "settle expired", method: "POST", target: "/v1/settle", body: settleOf(brief, 1), status: 410, code: "RESERVATION_EXPIRED"},
		{name: "renew expired", method: "POST", target: "/v1/renew", body: leaseOf(lapsing), status: 410, code: "RESERVATION_EXPIRED"},
		{name: "release expired", method: "POST", target: "/v1/release", body: leaseOf(lapsing), status: 410, code: "RESERVATION_EXPIRED"},
	})
}

// downServer runs the cases of a server whose Redis is down (nothing
// listens at its address), under on_error deny, with every endpoint of
// the admin door behind the token, one request in flight at most and a
// short body timeout.
func (r *apiRun) downServer(t *testing.T) {
	down := startServe(t, []string{admin.TokenEnv + "=" + tokenDown}, "--config", writeFile(t, openAPIDownRules),
		"--redis", "redis://"+closedPort(t)+"/0", "--admin-auth", "all", "--max-inflight", "1", "--header-timeout", "1s", "--body-timeout", "1s")
	r.run(t, down, []apiCase{
		{name: "check under deny", method: "POST", target: "/v1/check", body: `{"rule":"login","key":"192.0.2.1"}`, status: 503, code: "RATE_LIMITER_UNAVAILABLE"},
		{name: "check under allow", method: "POST", target: "/v1/check", body: `{"rule":"open","key":"192.0.2.1"}`, status: 200, without: noRateLimit},
		{name: "check under local", method: "POST", target: "/v1/check", body: `{"rule":"near","key":"192.0.2.1"}`, status: 200, without: noRateLimit},
		{name: "check under local, the last", method: "POST", target: "/v1/check", body: `{"rule":"near","key":"192.0.2.1"}`, status: 200, without: noRateLimit},
		{name: "check under local, denied", method: "POST", target: "/v1/check", body: `{"rule":"near","key":"192.0.2.1"}`, status: 429, without: noRateLimit},
		{name: "batch degraded", method: "POST", target: "/v1/check/batch", body: `{"checks":[{"rule":"login","key":"192.0.2.1"},{"rule":"open","key":"192.0.2.1"}]}`, status: 200},
		{name: "settle down", method: "POST", target: "/v1/settle", body: `{"rule":"login","key":"192.0.2.1","cost":1}`, status: 503, code: "STORE_UNAVAILABLE", without: []string{"Retry-After"}},
		{name: "settle batch down", method: "POST", target: "/v1/settle/batch", body: `{"settles":[{"rule":"login","key":"192.0.2.1","cost":1}]}`, status: 200},
		{name: "readyz down", method: "GET", target: "/readyz", status: 503},
		{name: "healthcheck down", method: "GET", target: "/healthcheck", status: 500},
		{name: "json down", method: "POST", target: "/json", body: `{"domain":"edge","descriptors":[{"entries":[{"key":"rule","value":"login"},{"key":"remote_address","value":"192.0.2.1"}]}]}`, status: 429},
		{name: "stats with the token", method: "GET", target: "/admin/v1/stats", header: bearer(tokenDown), status: 200},
		{name: "top with the token", method: "GET", target: "/admin/v1/top", header: bearer(tokenDown), status: 200},
		{name: "inspect down", method: "GET", target: "/admin/v1/inspect?rule=login&key=192.0.2.1", header: bearer(tokenDown), status: 503, code: "STORE_UNAVAILABLE", without: []string{"Retry-After"}},
		{name: "reset down", method: "POST", target: "/admin/v1/reset", header: bearer(tokenDown), body: `{"rule":"login","key":"192.0.2.1"}`, status: 503, code: "STORE_UNAVAILABLE", without: []string{"Retry-After"}},
		{name: "stats no token", method: "GET", target: "/admin/v1/stats", status: 401, code: "UNAUTHORIZED"},
	})
	r.wantStatuses(t, "settle batch down", 503) // the store's failure, in the batch's 200
	for _, c := range []apiCase{
		{name: "check timeout", method: "POST", target: "/v1/check", body: `{"rule"`, status: 408, code: "REQUEST_TIMEOUT", invalid: true},
		{name: "batch timeout", method: "POST", target: "/v1/check/batch", body: `{"checks"`, status: 408, code: "REQUEST_TIMEOUT", invalid: true},
		{name: "settle timeout", method: "POST", target: "/v1/settle", body: `{"reservation"`, status: 408, code: "REQUEST_TIMEOUT", invalid: true},
		{name: "settle batch timeout", method: "POST", target: "/v1/settle/batch", body: `{"settles"`, status: 408, code: "REQUEST_TIMEOUT", invalid: true},
		{name: "renew timeout", method: "POST", target: "/v1/renew", body: `{"reservation"`, status: 408, code: "REQUEST_TIMEOUT", invalid: true},
		{name: "release timeout", method: "POST", target: "/v1/release", body: `{"reservation"`, status: 408, code: "REQUEST_TIMEOUT", invalid: true},
	} {
		r.runTimeout(t, down, c)
	}
	// Every operation but the probes refuses a request beyond
	// --max-inflight.
	for _, c := range []apiCase{
		{method: "POST", target: "/v1/check", body: `{"rule":"open","key":"192.0.2.1"}`},
		{method: "POST", target: "/v1/check/batch", body: `{"checks":[{"rule":"open","key":"192.0.2.1"}]}`},
		{method: "POST", target: "/v1/settle", body: `{"rule":"open","key":"192.0.2.1","cost":1}`},
		{method: "POST", target: "/v1/settle/batch", body: `{"settles":[{"rule":"open","key":"192.0.2.1","cost":1}]}`},
		{method: "POST", target: "/v1/renew", body: `{"reservation":"x"}`},
		{method: "POST", target: "/v1/release", body: `{"reservation":"x"}`},
		{method: "POST", target: "/json", body: `{"domain":"edge","descriptors":[{"entries":[{"key":"rule","value":"open"},{"key":"remote_address","value":"192.0.2.1"}]}]}`},
		{method: "GET", target: "/"},
		{method: "GET", target: "/admin/ui/app.js"},
		{method: "GET", target: "/admin/ui/style.css"},
		{method: "GET", target: "/admin/ui/favicon.svg"},
		{method: "GET", target: "/admin/v1/stats", header: bearer(tokenDown)},
		{method: "GET", target: "/admin/v1/top", header: bearer(tokenDown)},
		{method: "GET", target: "/admin/v1/inspect?rule=open&key=192.0.2.1", header: bearer(tokenDown)},
		{method: "POST", target: "/admin/v1/reset", header: bearer(tokenDown), body: `{"rule":"open","key":"192.0.2.1"}`},
	} {
		c.name, c.status, c.code = "busy "+c.target, 503, "SERVER_BUSY"
		r.runBusy(t, down, c)
	}
	// Wrong tokens: 401 until 5 from this address, then 429 for every
	// request that needs the token, the right one too.
	wrong := bearer("not-the-token")
	r.run(t, down, []apiCase{
		{name: "stats wrong token", method: "GET", target: "/admin/v1/stats", header: wrong, status: 401, code: "UNAUTHORIZED"},
		{name: "top wrong token", method: "GET", target: "/admin/v1/top", header: wrong, status: 401, code: "UNAUTHORIZED"},
		{name: "inspect wrong token", method: "GET", target: "/admin/v1/inspect?rule=login&key=192.0.2.1", header: wrong, status: 401, code: "UNAUTHORIZED"},
		{name: "reset wrong token", method: "POST", target: "/admin/v1/reset", header: wrong, body: `{"rule":"login","key":"192.0.2.1"}`, status: 401, code: "UNAUTHORIZED"},
		{name: "stats wrong token again", method: "GET", target: "/admin/v1/stats", header: wrong, status: 401, code: "UNAUTHORIZED"},
		{name: "stats guessed", method: "GET", target: "/admin/v1/stats", header: bearer(tokenDown), status: 429, code: "RATE_LIMITED"},
		{name: "top guessed", method: "GET", target: "/admin/v1/top", header: wrong, status: 429, code: "RATE_LIMITED"},
		{name: "inspect guessed", method: "GET", target: "/admin/v1/inspect?rule=login&key=192.0.2.1", header: wrong, status: 429, code: "RATE_LIMITED"},
		{name: "reset guessed", method: "POST", target: "/admin/v1/reset", header: bearer(tokenDown), body: `{"rule":"login","key":"192.0.2.1"}`, status: 429, code: "RATE_LIMITED"},
	})
}

// envoyServer runs the cases of an envoyproxy/ratelimit config, which has
// no rules to inspect or reset.
func (r *apiRun) envoyServer(t *testing.T) {
	envoySrv := startServe(t, []string{admin.TokenEnv + "=" + tokenEnvoy}, "--config", writeFile(t, openAPIEnvoyConfig))
	r.run(t, envoySrv, []apiCase{
		{name: "json envoy", method: "POST", target: "/json", body: `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.1"}]}]}`, status: 200},
		{name: "inspect envoy", method: "GET", target: "/admin/v1/inspect?rule=login&key=192.0.2.1", status: 501, code: "NOT_IMPLEMENTED"},
		{name: "reset envoy", method: "POST", target: "/admin/v1/reset", header: bearer(tokenEnvoy), body: `{"rule":"login","key":"192.0.2.1"}`, status: 501, code: "NOT_IMPLEMENTED"},
	})
}

// resetsOff runs the case of a server without the token: resets are off.
func (r *apiRun) resetsOff(t *testing.T) {
	off := startServe(t, nil, "--config", writeFile(t, openAPIRules))
	r.run(t, off, []apiCase{
		{name: "reset off", method: "POST", target: "/admin/v1/reset", header: bearer("any"), body: loginCheck, status: 403, code: "RESET_DISABLED"},
	})
}

// covered checks that every documented answer of every operation was
// seen.
func (r *apiRun) covered(t *testing.T) {
	doc := r.doc
	for _, path := range doc.Paths.Keys() {
		for method, op := range doc.Paths.Value(path).Operations() {
			for _, code := range op.Responses.Keys() {
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s %s: answer %q is not a status", method, path, code)
					continue
				}
				if !r.seen[method+" "+path][status] {
					t.Errorf("%s %s: no case was answered %d, which the document has", method, path, status)
				}
			}
		}
	}
}

// methodsAndPaths checks the answers no operation documents: a method a
// path does not take is 405 with Allow listing the methods the document
// has, and a path outside the document is 404.
func (r *apiRun) methodsAndPaths(t *testing.T, d *daemon) {
	t.Helper()
	routes := serveAPIRoutes(t)
	for _, path := range r.doc.Paths.Keys() {
		methods := documentedMethods(r.doc, path)
		if !slices.ContainsFunc(routes, func(rt apiRoute) bool { return rt.path == path && rt.method != "" }) {
			continue // any method, as envoyproxy/ratelimit routes them
		}
		if path == "/" || path == "/metrics" {
			// GET-only routes of serve's own mux beside the decision API's
			// catch-all "/": another method falls through to that, and is
			// 404 NOT_FOUND (it names the path, wrongly, as none).
			continue
		}
		for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
			if slices.Contains(methods, m) {
				continue
			}
			x := r.send(t, d, apiCase{name: m + " " + path, method: m, target: path})
			allow := strings.Split(x.respHeader.Get("Allow"), ", ")
			allow = slices.DeleteFunc(allow, func(s string) bool { return s == "HEAD" })
			slices.Sort(allow)
			if x.status != 405 || !slices.Equal(allow, methods) {
				t.Errorf("%s %s: %d Allow %q, want 405 Allow %v", m, path, x.status, x.respHeader.Get("Allow"), methods)
			}
			if err := validateResponse(responseRoute(r.doc, "MethodNotAllowed", 405, m, path), x); err != nil {
				t.Errorf("%s %s: the 405 does not match the document's MethodNotAllowed: %v", m, path, err)
			}
		}
	}
	for _, path := range []string{"/v2/check", "/admin/v2/stats", "/favicon.ico"} {
		x := r.send(t, d, apiCase{method: "GET", target: path})
		if x.status != 404 {
			t.Errorf("GET %s: %d, want 404", path, x.status)
		}
		if err := validateResponse(responseRoute(r.doc, "NotFound", 404, "GET", path), x); err != nil {
			t.Errorf("GET %s: the 404 does not match the document's NotFound: %v", path, err)
		}
	}
}

// control proves that the harness tells wrong answers from right ones:
// real answers, each made wrong in one way, or checked against a
// document made wrong, must fail, and the real ones pass.
func (r *apiRun) control(t *testing.T) {
	admitted, denied, stats := r.kept["check admitted"], r.kept["check denied"], r.kept["stats"]
	reserved, settled, settledAgain, settleBatch := r.kept["check reserving"], r.kept["settle"], r.kept["settle again"], r.kept["settle batch"]
	shed, critical := r.kept["check shed"], r.kept["check critical"]
	if admitted == nil || denied == nil || stats == nil || reserved == nil || settled == nil || settledAgain == nil || settleBatch == nil || shed == nil || critical == nil {
		t.Fatal("the cases the control needs did not run")
	}
	edit := func(x *exchange, f func(m map[string]any)) *exchange {
		var m map[string]any
		if err := json.Unmarshal(x.body, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		y := *x
		y.body, _ = json.Marshal(m)
		return &y
	}
	withHeader := func(x *exchange, name, value string) *exchange {
		y := *x
		y.respHeader = x.respHeader.Clone()
		if value == "" {
			y.respHeader.Del(name)
		} else {
			y.respHeader.Set(name, value)
		}
		return &y
	}
	withStatus := func(x *exchange, status int) *exchange { y := *x; y.status = status; return &y }
	withBody := func(x *exchange, body string) *exchange { y := *x; y.body = []byte(body); return &y }
	// item returns the settle i of a settle batch's answer m.
	item := func(m map[string]any, i int) map[string]any { return m["results"].([]any)[i].(map[string]any) }
	// The shed cases answer what the rows below hold them to.
	if !bytes.Contains(shed.body, []byte(`"class":"default","shed":true`)) || !bytes.Contains(critical.body, []byte(`"class":"critical"`)) || bytes.Contains(critical.body, []byte(`"shed"`)) {
		t.Fatalf("the shed cases: %s and %s; want the lowest class shed and the critical admitted", shed.body, critical.body)
	}
	// A document whose CheckResult says remaining is a string.
	mutated := loadSpec(t)
	mutated.Components.Schemas["CheckResult"].Value.Properties["remaining"].Value.Type = &openapi3.Types{"string"}

	for _, tt := range []struct {
		name string
		doc  *openapi3.T
		x    *exchange
		ok   bool
	}{
		{"the real 200", r.doc, admitted, true},
		{"the real 429", r.doc, denied, true},
		{"the real stats", r.doc, stats, true},
		{"allowed missing", r.doc, edit(admitted, func(m map[string]any) { delete(m, "allowed") }), false},
		{"remaining a string", r.doc, edit(admitted, func(m map[string]any) { m["remaining"] = "9" }), false},
		{"remaining negative", r.doc, edit(admitted, func(m map[string]any) { m["remaining"] = -1 }), false},
		{"a field the document lacks", r.doc, edit(admitted, func(m map[string]any) { m["colour"] = "red" }), false},
		{"a field the document lacks, deep in stats", r.doc, edit(stats, func(m map[string]any) { m["store"].(map[string]any)["mood"] = "calm" }), false},
		{"a policy without its name", r.doc, edit(admitted, func(m map[string]any) { delete(m["policies"].([]any)[0].(map[string]any), "name") }), false},
		{"a 429 without Retry-After", r.doc, withHeader(denied, "Retry-After", ""), false},
		{"Retry-After 0", r.doc, withHeader(denied, "Retry-After", "0"), false},
		{"a RateLimit header in another syntax", r.doc, withHeader(admitted, "RateLimit", "limit=2, remaining=1"), false},
		{"a status the operation lacks", r.doc, withStatus(admitted, 418), false},
		{"an error body for a 200", r.doc, &exchange{method: "POST", path: "/v1/check", header: admitted.header, reqBody: admitted.reqBody,
			status: 200, respHeader: admitted.respHeader, body: []byte(`{"error":{"code":"BAD_REQUEST","message":"no"}}`)}, false},
		{"text for JSON", r.doc, withHeader(admitted, "Content-Type", "text/plain"), false},
		{"the real shed", r.doc, shed, true},
		{"the real critical", r.doc, critical, true},
		{"shed a string", r.doc, edit(shed, func(m map[string]any) { m["shed"] = "yes" }), false},
		{"an empty class", r.doc, edit(critical, func(m map[string]any) { m["class"] = "" }), false},
		{"the real reservation", r.doc, reserved, true},
		{"an empty reservation", r.doc, edit(reserved, func(m map[string]any) { m["reservation"] = "" }), false},
		{"the real settle", r.doc, settled, true},
		{"the real settle batch", r.doc, settleBatch, true},
		{"a settle without its limit", r.doc, edit(settled, func(m map[string]any) { delete(m, "limit") }), false},
		{"a settle with a reservation", r.doc, edit(settled, func(m map[string]any) { m["reservation"] = "x" }), false},
		{"a settle error code the document does not list", r.doc, withBody(settledAgain, `{"error":{"code":"OOPS","message":"no"}}`), false},
		{"a settle of a batch without its status", r.doc, edit(settleBatch, func(m map[string]any) { delete(item(m, 0), "status") }), false},
		{"a settle of a batch, settled, of status 409", r.doc, edit(settleBatch, func(m map[string]any) { item(m, 0)["status"] = 409 }), false},
		{"a failed settle of a batch with an answer too", r.doc, edit(settleBatch, func(m map[string]any) { item(m, 1)["allowed"] = false }), false},
		{"a failed settle of a batch of status 200", r.doc, edit(settleBatch, func(m map[string]any) { item(m, 1)["status"] = 200 }), false},
		{"a document that says remaining is a string", mutated, admitted, false},
	} {
		rt, err := specRoute(tt.doc, tt.x.method, tt.x.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := validateResponse(rt, tt.x); (err == nil) != tt.ok {
			t.Errorf("%s: validation error %v, want one: %v", tt.name, err, !tt.ok)
		}
	}
	// An error code the document does not list.
	bad := &exchange{method: "POST", path: "/v1/check", header: admitted.header, reqBody: admitted.reqBody, status: 400,
		respHeader: admitted.respHeader, body: []byte(`{"error":{"code":"OOPS","message":"no"}}`)}
	if rt, _ := specRoute(r.doc, "POST", "/v1/check"); validateResponse(rt, bad) == nil {
		t.Error("an error code the document does not list passed")
	}
	if err := validateRequest(r.doc, &exchange{method: "POST", path: "/v1/check", header: admitted.header, reqBody: []byte(`{"rule":"login","cost":-1}`)}); err == nil {
		t.Error("a request of negative cost passed")
	}
}
