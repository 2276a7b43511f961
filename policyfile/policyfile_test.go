//go:build integration

package policyfile_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/policyfile"
)

// limitRules is a rule admitting n requests a minute per client address.
func limitRules(n int) string {
	return fmt.Sprintf("rules:\n  - {name: r, key: ip, algorithm: sliding_log, limit: %d, period: 1m}\n", n)
}

// step is one decision and what it should be.
type step struct {
	key       string
	allowed   bool
	remaining int
}

// run checks rule r of p for each step, in order.
func run(t *testing.T, p *policyfile.Policy, steps []step) {
	t.Helper()
	for i, s := range steps {
		d := check(t, p, "r", s.key)
		res := d.Result()
		if d.Allowed != s.allowed || res.Remaining != s.remaining || d.Degraded != sluice.NotDegraded {
			t.Errorf("step %d: Check(r, %s) = allowed %v, remaining %d, degraded %q; want %v, %d, by the store", i, s.key, d.Allowed, res.Remaining, d.Degraded, s.allowed, s.remaining)
		}
	}
}

// TestOpenInMemory: a file without a redis section decides in process,
// says so once, and is always ready; each Policy counts alone.
func TestOpenInMemory(t *testing.T) {
	path := writeFile(t, limitRules(2))
	log := &logs{}
	p := open(t, path, log)
	run(t, p, []step{{"192.0.2.1", true, 1}, {"192.0.2.1", true, 0}, {"192.0.2.1", false, 0}, {"192.0.2.2", true, 1}})
	if n := len(log.entries(t, "in-memory store, whose limits hold per process")); n != 1 {
		t.Errorf("%d log lines about the in-memory store, want 1", n)
	}
	if err := p.Ready(context.Background()); err != nil {
		t.Errorf("Ready: %v, want nil", err)
	}
	if f := p.File(); f.Path != path || f.Redis.URL != "" || len(f.Rules) != 1 {
		t.Errorf("File() = %+v, want the file at %s with no Redis and one rule", f, path)
	}
	// Another Policy of the same file is another replica: its own counts.
	run(t, open(t, path, nil), []step{{"192.0.2.1", true, 1}})
}

// TestOpenRedisLater: a Policy opened while Redis is down decides by its
// on_error policy, each replica alone; once Redis is up it connects in
// the background, and the replicas share one count.
func TestOpenRedisLater(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	path := writeFile(t, "redis: {url: redis://"+srv.Addr+", on_error: local}\n"+limitRules(1))
	log := &logs{}
	a, b := open(t, path, log), open(t, path, nil)
	for name, p := range map[string]*policyfile.Policy{"a": a, "b": b} {
		if d := check(t, p, "r", "192.0.2.1"); !d.Allowed || d.Degraded != sluice.DegradedLocal {
			t.Errorf("replica %s with Redis down: allowed %v, degraded %q; want allowed by the local fallback", name, d.Allowed, d.Degraded)
		}
	}
	log.waitLog(t, "redis unreachable")
	srv.Restart(t)
	for name, p := range map[string]*policyfile.Policy{"a": a, "b": b} {
		waitFor(t, func() error { // each polls a client of its own
			if d := check(t, p, "r", "198.51.100.1"); d.Degraded != sluice.NotDegraded {
				return fmt.Errorf("replica %s: Redis is up, and decisions are still degraded %q", name, d.Degraded)
			}
			return nil
		})
	}
	log.waitLog(t, "redis reachable")
	// One count for both replicas.
	run(t, a, []step{{"192.0.2.1", true, 0}})
	run(t, b, []step{{"192.0.2.1", false, 0}})
}

// TestWithRedis: WithRedis overrides the file's section, and a reload
// compares the next file's section after the override: only a change of
// the file's own section warns.
func TestWithRedis(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr
	path := writeFile(t, limitRules(1)) // no redis section: in memory
	override := policyfile.WithRedis(func(r config.Redis) config.Redis {
		r.URL = url
		return r
	})
	log := &logs{}
	a, b := open(t, path, log, override), open(t, path, nil, override)
	if len(log.entries(t, "in-memory store")) != 0 {
		t.Error("the in-memory store was opened despite WithRedis")
	}
	// The override's Redis holds the counts: both Policies share them.
	run(t, a, []step{{"192.0.2.1", true, 0}})
	run(t, b, []step{{"192.0.2.1", false, 0}})
	if got := a.File().Redis.URL; got != "" {
		t.Errorf("File().Redis.URL = %q, want the file's own (none)", got)
	}

	rewrite(t, path, limitRules(2))
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if es := log.entries(t, "redis section changed"); len(es) != 0 {
		t.Errorf("a reload that changed only the rules warned: %v", es)
	}
	rewrite(t, path, "redis: {on_error: deny}\n"+limitRules(2))
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	es := log.entries(t, "redis section changed")
	if len(es) != 1 || es[0]["level"] != "WARN" {
		t.Errorf("a reload that changed the redis section logged %v, want one warning", es)
	}
	for _, e := range es {
		for _, v := range e {
			if s, ok := v.(string); ok && strings.Contains(s, srv.Addr) {
				t.Errorf("the warning names the Redis URL: %v", e)
			}
		}
	}
	// The store keeps its settings: the override's Redis, shared.
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	run(t, a, []step{{"192.0.2.5", true, 1}})
	run(t, b, []step{{"192.0.2.5", true, 0}, {"192.0.2.5", false, 0}})
}

// TestReload: a valid file replaces the rules, and its limits apply; an
// invalid one is an error listing its problems, and the old rules keep
// serving.
func TestReload(t *testing.T) {
	path := writeFile(t, limitRules(1))
	p := open(t, path, nil)
	run(t, p, []step{{"192.0.2.1", true, 0}, {"192.0.2.1", false, 0}})

	rewrite(t, path, limitRules(3))
	if err := p.Reload(); err != nil {
		t.Fatalf("Reload of a valid file: %v", err)
	}
	if d := check(t, p, "r", "192.0.2.1"); !d.Allowed || d.Result().Limit != 3 {
		t.Errorf("after the reload: allowed %v under limit %d, want allowed under 3", d.Allowed, d.Result().Limit)
	}
	run(t, p, []step{{"192.0.2.2", true, 2}, {"192.0.2.2", true, 1}, {"192.0.2.2", true, 0}, {"192.0.2.2", false, 0}})
	if got := p.File().Rules[0].Limits[0].Limit; got != 3 {
		t.Errorf("File() after the reload has limit %d, want 3", got)
	}

	rewrite(t, path, "rules:\n  - name: r\n    key: ip\n    limit: 10\n    perod: 1m\n")
	err := p.Reload()
	var errs config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Reload of an invalid file: %v, want config.Errors", err)
	}
	if !strings.Contains(err.Error(), `rules "r": unknown field "perod" (did you mean "period"?)`) || !strings.Contains(err.Error(), path+":5)") {
		t.Errorf("Reload error %q, want the unknown field on line 5", err)
	}
	run(t, p, []step{{"192.0.2.3", true, 2}})
	if got := p.File().Rules[0].Limits[0].Limit; got != 3 {
		t.Errorf("File() after a rejected file has limit %d, want the old 3", got)
	}
}

// TestOpenInvalid: Open of an invalid file is its config.Errors.
func TestOpenInvalid(t *testing.T) {
	path := writeFile(t, "rules:\n  - {name: r, key: ip, limit: 0, period: 1m}\n")
	_, err := policyfile.Open(path)
	var errs config.Errors
	if !errors.As(err, &errs) || len(errs) == 0 || errs[0].Line != 2 {
		t.Errorf("Open: %v, want config.Errors with line 2", err)
	}
}

// TestMiddlewareReload: the middleware answers as the file's http
// section says, and follows a reload of it.
func TestMiddlewareReload(t *testing.T) {
	path := writeFile(t, "rules:\n  - {name: r, key: ip, algorithm: sliding_log, limit: 2, period: 1m}\n")
	p := open(t, path, nil)
	h := p.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	serve := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil)) // from 192.0.2.1
		return w
	}
	if w := serve(); w.Code != 204 || w.Header().Get("RateLimit-Policy") != `"r-1m";q=2;w=60` || w.Header().Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("first request: %d %v, want 204 with both kinds of headers", w.Code, w.Header())
	}

	rewrite(t, path, "http: {headers: none}\nrules:\n  - {name: r, key: ip, algorithm: sliding_log, limit: 2, period: 1m}\n")
	if err := p.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := serve(); w.Code != 204 || len(w.Header()) != 0 {
		t.Errorf("second request, headers: none: %d %v, want 204 without headers", w.Code, w.Header())
	}
	if w := serve(); w.Code != 429 || w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit") != "" {
		t.Errorf("third request: %d %v, want 429 with Retry-After and no rate-limit headers", w.Code, w.Header())
	}

	rewrite(t, path, "http: {headers: legacy}\nrules:\n  - {name: r, key: ip, algorithm: sliding_log, limit: 5, period: 1m}\n")
	if err := p.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := serve(); w.Code != 204 || w.Header().Get("X-RateLimit-Limit") != "5" || w.Header().Get("RateLimit-Policy") != "" {
		t.Errorf("after the second reload: %d %v, want 204 with X-RateLimit-Limit 5 only", w.Code, w.Header())
	}
}

// TestReadyDeny: under on_error: deny a Policy is not ready while Redis is
// down, and refuses decisions; once Redis is up it is ready. Under local
// it is ready all along.
func TestReadyDeny(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	url := "redis://" + srv.Addr
	deny := open(t, writeFile(t, "redis: {url: "+url+", on_error: deny}\n"+limitRules(5)), nil)
	local := open(t, writeFile(t, "redis: {url: "+url+", on_error: local}\n"+limitRules(5)), nil)
	ctx := context.Background()
	if err := deny.Ready(ctx); err == nil {
		t.Error("Ready under deny with Redis down: nil, want an error")
	}
	if d := check(t, deny, "r", "192.0.2.1"); d.Allowed || d.Degraded != sluice.DegradedDeny {
		t.Errorf("decision under deny with Redis down: allowed %v, degraded %q; want refused by deny", d.Allowed, d.Degraded)
	}
	if err := local.Ready(ctx); err != nil {
		t.Errorf("Ready under local with Redis down: %v, want nil", err)
	}
	srv.Restart(t)
	waitFor(t, func() error { return deny.Ready(ctx) })
	run(t, deny, []step{{"192.0.2.1", true, 4}})
}

// TestWithRuleOptions: the rule options apply to the file's rules, at Open
// and at every reload.
func TestWithRuleOptions(t *testing.T) {
	path := writeFile(t, limitRules(1))
	user := policy.WithKey("r", func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-User")
		return u, u != ""
	})
	p := open(t, path, nil, policyfile.WithRuleOptions(user))
	h := p.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	serve := func(u string) int {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-User", u)
		h.ServeHTTP(w, req)
		return w.Code
	}
	for i, tt := range []struct {
		user string
		want int
	}{{"ana", 204}, {"ana", 429}, {"bo", 204}} {
		if got := serve(tt.user); got != tt.want {
			t.Errorf("request %d as %s: %d, want %d", i, tt.user, got, tt.want)
		}
	}
	rewrite(t, path, limitRules(2))
	if err := p.Reload(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{204, 204, 429} {
		if got := serve("cy"); got != want {
			t.Errorf("request %d as cy after the reload to 2: %d, want %d", i, got, want)
		}
	}
}

// TestReadyACL: under on_error: deny a Policy whose Redis user may run
// scripts but not write is not ready, although Redis answers PING: Ready
// runs a decision.
func TestReadyACL(t *testing.T) {
	srv := redistest.Start(t)
	host, port, _ := net.SplitHostPort(srv.Addr)
	if out, err := exec.Command("redis-cli", "-h", host, "-p", port, "ACL", "SETUSER", "nowrite", "on", ">pw", "~*", "+@all", "-@write").CombinedOutput(); err != nil {
		t.Fatalf("ACL SETUSER: %v: %s", err, out)
	}
	p := open(t, writeFile(t, "redis: {url: redis://nowrite:pw@"+srv.Addr+", on_error: deny}\n"+limitRules(5)), nil)
	var err error
	waitFor(t, func() error {
		if err = p.Ready(context.Background()); err == nil {
			return errors.New("ready, with a user that may not write")
		}
		if !strings.Contains(err.Error(), "NOPERM") {
			return fmt.Errorf("not ready for another reason: %v", err)
		}
		return nil
	})
	if d := check(t, p, "r", "192.0.2.1"); d.Allowed {
		t.Errorf("a decision as a user that may not write was admitted under deny")
	}
}
