//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/internal/service/admin"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
)

// operatorRules has one rule per algorithm, each 3 per hour (so that no
// window ends and no token refills between an inspect and the request
// after it), and a rule in shadow mode.
const operatorRules = `
rules:
  - {name: fw, match: /fw, key: header:X-Key, limit: 3, period: 1h, algorithm: fixed_window}
  - {name: sw, match: /sw, key: header:X-Key, limit: 3, period: 1h, algorithm: sliding_window}
  - {name: sl, match: /sl, key: header:X-Key, limit: 3, period: 1h, algorithm: sliding_log}
  - {name: tb, match: /tb, key: header:X-Key, limit: 3, period: 1h, algorithm: token_bucket}
  - {name: gc, match: /gc, key: header:X-Key, limit: 3, period: 1h, algorithm: gcra}
  - {name: sh, match: /sh, key: header:X-Key, limit: 1, period: 1h, shadow: true}
`

// operator runs an operator command (inspect, reset, top) in process
// against d and returns its stdout, failing t when it fails.
func operator(t *testing.T, d *daemon, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append(args, "--server", d.base)
	if code := Run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("sluice %s: exit %d: %s%s", strings.Join(args, " "), code, stderr.String(), stdout.String())
	}
	return stdout.String()
}

// inspect runs sluice inspect --json and decodes its answer.
func inspect(t *testing.T, d *daemon, rule, key string, cost int) admin.Inspection {
	t.Helper()
	out := operator(t, d, "inspect", "--json", "--rule", rule, "--key", key, "--cost", fmt.Sprint(cost))
	var in admin.Inspection
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("inspect --json: %v: %s", err, out)
	}
	return in
}

// checked is the part of a /v1/check answer an inspection predicts.
type checked struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int   `json:"remaining"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	RetryAfterMS int64 `json:"retry_after_ms"`
}

// TestInspectAgrees: on the memory store and on Redis, for every
// algorithm, what sluice inspect says a request of cost n would get is
// what the next POST /v1/check of cost n gets: admitted or not, what
// remains, and (within the milliseconds between the two) when it resets
// and when it may retry; inspecting spends nothing and is not counted as
// a decision.
func TestInspectAgrees(t *testing.T) {
	srv := redistest.Start(t)
	for _, store := range []struct {
		name string
		env  []string
	}{
		{"memory", nil},
		{"redis", []string{"SLUICE_REDIS_URL=redis://" + srv.Addr}},
	} {
		t.Run(store.name, func(t *testing.T) {
			d := startServe(t, store.env, "--config", writeFile(t, operatorRules))
			for _, rule := range []string{"fw", "sw", "sl", "tb", "gc"} {
				// A cost of 2 is denied while one unit remains, and a cost of
				// 1 then admitted: the state says so before each.
				for i, cost := range []int{1, 1, 2, 1, 2, 1} {
					in := inspect(t, d, rule, "client-a", cost)
					again := inspect(t, d, rule, "client-a", cost)
					if in.Allowed != again.Allowed || in.Limits[0].Remaining != again.Limits[0].Remaining {
						t.Fatalf("%s step %d: a second inspect differs (%+v, then %+v): inspecting spent", rule, i, in, again)
					}
					_, _, body := d.post(t, "/v1/check", fmt.Sprintf(`{"rule":%q,"key":"client-a","cost":%d}`, rule, cost))
					var got checked
					if err := json.Unmarshal([]byte(body), &got); err != nil {
						t.Fatalf("%s step %d: %v: %s", rule, i, err, body)
					}
					l := in.Limits[0]
					if got.Allowed != in.Allowed || got.Allowed != l.Allowed || got.Remaining != l.Remaining {
						t.Errorf("%s step %d (cost %d): inspect said allowed %v remaining %d; the request got %s", rule, i, cost, in.Allowed, l.Remaining, body)
					}
					if !near(got.RetryAfterMS, l.RetryAfterMS) || !near(got.RetryAfterMS, in.RetryAfterMS) || !near(got.ResetAfterMS, l.ResetAfterMS) {
						t.Errorf("%s step %d (cost %d): inspect said retry %dms reset %dms; the request got %s", rule, i, cost, l.RetryAfterMS, l.ResetAfterMS, body)
					}
				}
			}
			// A rule in shadow mode: inspect says it would deny, and that
			// it is in shadow mode.
			d.post(t, "/v1/check", `{"rule":"sh","key":"client-a"}`)
			if in := inspect(t, d, "sh", "client-a", 1); !in.Shadow || in.Allowed {
				t.Errorf("shadow rule after its one request: %+v, want shadow and not allowed", in)
			}
			// Inspections are not decisions: the metrics count only the
			// checks (3 admitted of 6 per rule).
			text := scrapeMetrics(t, d)
			for _, want := range []string{
				`sluice_decisions_total{outcome="allowed",rule="fw"} 3`,
				`sluice_decisions_total{outcome="denied",rule="fw"} 3`,
				`sluice_decisions_total{outcome="allowed",rule="gc"} 3`,
			} {
				if !strings.Contains(text, want+"\n") {
					t.Errorf("/metrics lacks %s", want)
				}
			}
		})
	}
}

// near reports whether two durations in ms, taken a few ms apart, agree:
// the later one (a) is not longer, and not more than a second shorter.
func near(a, b int64) bool { return a <= b && a >= b-1000 }

// TestReset: sluice reset is refused unless the server was started with
// the token, and then without the right one; with it, the client's state
// is forgotten under the rule, its deny cache entries too, so that its
// next request is admitted with a full quota, and another client's state
// is untouched.
func TestReset(t *testing.T) {
	srv := redistest.Start(t)
	cfg := writeFile(t, "redis:\n  deny_cache: true\n"+operatorRules)
	run := func(d *daemon, token string, args ...string) (int, string) {
		t.Setenv(admin.TokenEnv, token)
		var out bytes.Buffer
		code := Run(context.Background(), append(args, "--server", d.base), &out, &out)
		return code, out.String()
	}
	spend := func(d *daemon, key string, n int) {
		for range n {
			d.post(t, "/v1/check", `{"rule":"fw","key":"`+key+`"}`)
		}
	}

	off := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr, admin.TokenEnv + "="}, "--config", cfg)
	if code, out := run(off, "secret", "reset", "--rule", "fw", "--key", "a"); code != 1 || !strings.Contains(out, admin.TokenEnv) {
		t.Errorf("reset of a server started without %s: exit %d: %s; want 1, saying it is off", admin.TokenEnv, code, out)
	}
	if code, out := run(off, "", "reset", "--rule", "fw", "--key", "a"); code != 2 || !strings.Contains(out, admin.TokenEnv) {
		t.Errorf("reset without %s: exit %d: %s; want a usage error naming it", admin.TokenEnv, code, out)
	}
	off.terminate(t)

	d := startServe(t, []string{"SLUICE_REDIS_URL=redis://" + srv.Addr, admin.TokenEnv + "=secret"}, "--config", cfg)
	spend(d, "a", 5) // 3 admitted, 2 denied: the last one cached
	spend(d, "b", 2)
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"fw","key":"a"}`); code != 429 {
		t.Fatalf("client a after its quota: %d, want 429", code)
	}
	if code, out := run(d, "wrong", "reset", "--rule", "fw", "--key", "a"); code != 1 || !strings.Contains(out, "401") {
		t.Errorf("reset with a wrong token: exit %d: %s; want 1 and a 401", code, out)
	}
	if code, out := run(d, "secret", "reset", "--rule", "nope", "--key", "a"); code != 1 || !strings.Contains(out, `unknown rule "nope"`) {
		t.Errorf("reset of an unknown rule: exit %d: %s", code, out)
	}
	if code, out := run(d, "secret", "reset", "--rule", "fw", "--key", "a"); code != 0 || !strings.Contains(out, "1 limit(s) forgotten") {
		t.Fatalf("reset: exit %d: %s", code, out)
	}
	// Each reset is logged, the key masked, and so is a refused one.
	if entry := d.waitLog(t, "sluice: admin request refused"); entry["remote"] == nil {
		t.Errorf("refused reset logged as %v, want the remote address", entry)
	}
	if entry := d.waitLog(t, "sluice: reset"); entry["rule"] != "fw" || entry["key"] != policy.MaskKey("a") {
		t.Errorf("reset logged as %v, want rule fw and key %q", entry, policy.MaskKey("a"))
	}
	for i := 1; i <= 4; i++ {
		code, _, body := d.post(t, "/v1/check", `{"rule":"fw","key":"a"}`)
		if want := map[bool]int{true: 200, false: 429}[i <= 3]; code != want {
			t.Errorf("client a request %d after the reset: %d %s, want %d", i, code, body, want)
		}
	}
	if in := inspect(t, d, "fw", "b", 1); in.Limits[0].Remaining != 0 {
		t.Errorf("client b after a's reset: %+v, want its 2 spent (0 remaining after one more)", in)
	}
}

// TestDenialLog: --log-denials 1 logs every denial with its rule and the
// client key masked, --show-keys in the clear; the default logs about
// one in a hundred, and a bad share is a usage error.
func TestDenialLog(t *testing.T) {
	cfg := writeFile(t, operatorRules)
	for _, tc := range []struct {
		flags []string
		key   string
	}{
		{[]string{"--log-denials", "1"}, policy.MaskKey("client-a")},
		{[]string{"--log-denials", "1", "--show-keys"}, "client-a"},
	} {
		d := startServe(t, nil, append([]string{"--config", cfg}, tc.flags...)...)
		for range 4 {
			d.post(t, "/v1/check", `{"rule":"fw","key":"client-a"}`)
		}
		entry := d.waitLog(t, "sluice: rate limited")
		if entry["rule"] != "fw" || entry["key"] != tc.key {
			t.Errorf("%v: denial logged as %v, want rule fw and key %q", tc.flags, entry, tc.key)
		}
		d.mu.Lock()
		logs := strings.Join(d.lines, "\n")
		d.mu.Unlock()
		if strings.Contains(logs, "client-a") != (tc.key == "client-a") {
			t.Errorf("%v: the key in the clear is in the log %v, want %v", tc.flags, !(tc.key == "client-a"), tc.key == "client-a")
		}
	}
	var out bytes.Buffer
	if code := Run(context.Background(), []string{"serve", "--config", cfg, "--log-denials", "2"}, &out, &out); code != 2 || !strings.Contains(out.String(), "--log-denials 2") {
		t.Errorf("--log-denials 2: exit %d: %s; want a usage error", code, out.String())
	}
}

// TestTop: sluice top prints the most limited keys, the most denied
// first, with their rule and exact counts (fewer keys than counters),
// masked unless the server shows keys, and not a key never denied.
func TestTop(t *testing.T) {
	cfg := writeFile(t, operatorRules)
	for _, show := range []bool{false, true} {
		var flags []string
		name := func(k string) string { return policy.MaskKey(k) }
		if show {
			flags, name = []string{"--show-keys"}, func(k string) string { return k }
		}
		d := startServe(t, nil, append([]string{"--config", cfg}, flags...)...)
		for key, n := range map[string]int{"hammer": 10, "twice": 5, "polite": 3} {
			for range n {
				d.post(t, "/v1/check", `{"rule":"fw","key":"`+key+`"}`)
			}
		}
		var top admin.TopKeys
		if err := json.Unmarshal([]byte(operator(t, d, "top", "--json")), &top); err != nil {
			t.Fatal(err)
		}
		want := []admin.TopKey{{Rule: "fw", Key: name("hammer"), Denied: 7}, {Rule: "fw", Key: name("twice"), Denied: 2}}
		if top.Masked == show || !slices.Equal(top.Keys, want) {
			t.Errorf("--show-keys %v: top %+v, want masked %v and %+v", show, top, !show, want)
		}
		table := operator(t, d, "top", "--keys", "1")
		if !strings.Contains(table, name("hammer")) || strings.Contains(table, name("twice")) || !strings.Contains(table, "9 limiting decisions") {
			t.Errorf("--show-keys %v: sluice top --keys 1 printed:\n%s", show, table)
		}
	}
}

// TestInspectErrors: an operator command that cannot get an answer of the
// operator API says so, naming what is wrong, and fails: a --server that
// is no http URL is a usage error, a server that is down is named with
// the refusal, and a server that answers something else than the API's
// JSON (a web page, or a sluice serve with the dashboard off) is an
// error, with --json too (its answer is never printed as if it were
// one).
func TestInspectErrors(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html><body>welcome</body></html>")
	}))
	defer page.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	off := startServe(t, nil, "--config", writeFile(t, operatorRules), "--dashboard=false")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		says   []string
		silent bool // nothing on stdout
	}{
		{"no scheme", []string{"inspect", "--rule", "fw", "--server", "localhost:8080"}, 2, []string{"--server", "localhost:8080", "not an http or https URL"}, true},
		{"down", []string{"inspect", "--rule", "fw", "--server", "http://" + down}, 1, []string{down, "connection refused"}, true},
		{"a web page", []string{"inspect", "--rule", "fw", "--server", page.URL}, 1, []string{"not what this sluice understands"}, true},
		{"a web page, --json", []string{"inspect", "--json", "--rule", "fw", "--server", page.URL}, 1, []string{"not what this sluice understands"}, true},
		{"top of a web page, --json", []string{"top", "--json", "--server", page.URL}, 1, []string{"not what this sluice understands"}, true},
		{"dashboard off", []string{"inspect", "--rule", "fw", "--server", off.base}, 1, []string{"404", off.base, "--dashboard-listen"}, true},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tc.args, &stdout, &stderr)
		msg := stderr.String()
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d: %s%s", tc.name, code, tc.code, msg, stdout.String())
		}
		for _, s := range tc.says {
			if !strings.Contains(msg, s) {
				t.Errorf("%s: the error %q does not say %q", tc.name, msg, s)
			}
		}
		if tc.silent && stdout.Len() != 0 {
			t.Errorf("%s: printed %q as an answer", tc.name, stdout.String())
		}
	}
}

// TestOperatorComposite: a client Envoy names by several descriptor
// entries (a composite key, through the rules service) is listed by
// sluice top, and sluice inspect --composite and reset --composite reach
// its state: inspect says what its next request gets, reset forgets it.
func TestOperatorComposite(t *testing.T) {
	cfg := writeFile(t, "rules:\n  - {name: api, match: /api, key: header:X-Tenant, limit: 2, period: 1h}\n")
	d := startServe(t, []string{admin.TokenEnv + "=secret"}, "--config", cfg, "--show-keys")
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func() rlsv3.RateLimitResponse_Code {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: envoy.RuleEntry, Value: "api"}, {Key: "tenant", Value: "t1"}, {Key: "user", Value: "u1"}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask(); got != want {
			t.Fatalf("request %d: %v, want %v", i+1, got, want)
		}
	}
	var top admin.TopKeys
	if err := json.Unmarshal([]byte(operator(t, d, "top", "--json")), &top); err != nil || len(top.Keys) != 1 {
		t.Fatalf("top: %+v, %v; want the one limited client", top, err)
	}
	key := top.Keys[0].Key
	out := operator(t, d, "inspect", "--json", "--rule", "api", "--key", key, "--composite")
	var in admin.Inspection
	if err := json.Unmarshal([]byte(out), &in); err != nil || in.Allowed || in.Limits[0].Remaining != 0 {
		t.Errorf("inspect --composite %q: %s, %v; want denied, nothing remaining", key, out, err)
	}
	// Without --composite the same text is another client, never seen.
	if in := inspect(t, d, "api", key, 1); !in.Allowed || in.Limits[0].Remaining != 1 {
		t.Errorf("inspect %q without --composite: %+v, want a fresh client", key, in)
	}
	t.Setenv(admin.TokenEnv, "secret")
	if out := operator(t, d, "reset", "--rule", "api", "--key", key, "--composite"); !strings.Contains(out, "1 limit(s) forgotten") {
		t.Errorf("reset --composite: %s", out)
	}
	if got := ask(); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("after reset --composite: %v, want OK", got)
	}
}

// TestOperatorMasked: the masked key sluice top shows is a key sluice
// inspect and reset take: inspect reads the state of the key it masks
// (and answers naming the mask, not the key), reset forgets it; a mask of
// no key the server's top tracks, or of two, is an error that says so
// and to give the key in the clear.
func TestOperatorMasked(t *testing.T) {
	// Two keys with one mask (see admin's TestTopUnmask).
	colliding := [2]string{"k46db62410c90", "k4c6199a87ff4"}
	d := startServe(t, []string{admin.TokenEnv + "=secret"}, "--config", writeFile(t, operatorRules))
	spend := func(key string, n int) {
		for range n {
			d.post(t, "/v1/check", `{"rule":"fw","key":"`+key+`"}`)
		}
	}
	spend("hammer", 5) // 3 admitted, 2 denied
	spend(colliding[0], 4)
	spend(colliding[1], 4)
	var top admin.TopKeys
	if err := json.Unmarshal([]byte(operator(t, d, "top", "--json")), &top); err != nil || len(top.Keys) == 0 {
		t.Fatalf("top: %+v, %v", top, err)
	}
	masked := top.Keys[0].Key
	if masked != policy.MaskKey("hammer") {
		t.Fatalf("top's most limited key is %q, want hammer masked (%s)", masked, policy.MaskKey("hammer"))
	}

	in := inspect(t, d, "fw", masked, 1)
	if in.Key != masked || in.Allowed || in.Limits[0].Remaining != 0 {
		t.Errorf("inspect --key %s: %+v; want hammer's state (denied, 0 remaining), named by the mask", masked, in)
	}
	if table := operator(t, d, "inspect", "--rule", "fw", "--key", masked); !strings.Contains(table, `key "`+masked+`"`) || strings.Contains(table, "hammer") {
		t.Errorf("inspect --key %s printed:\n%s\nwant the mask, never the key", masked, table)
	}
	t.Setenv(admin.TokenEnv, "secret")
	if out := operator(t, d, "reset", "--rule", "fw", "--key", masked); out != fmt.Sprintf("reset rule fw, key %q: 1 limit(s) forgotten\n", masked) {
		t.Errorf("reset --key %s printed %q", masked, out)
	}
	if entry := d.waitLog(t, "sluice: reset"); entry["key"] != masked {
		t.Errorf("reset logged as %v, want the key masked, %s", entry, masked)
	}
	if code, _, body := d.post(t, "/v1/check", `{"rule":"fw","key":"hammer"}`); code != 200 || !strings.Contains(body, `"remaining":2`) {
		t.Errorf("hammer after the reset of its mask: %d %s, want 200 with 2 remaining", code, body)
	}

	for _, tt := range []struct {
		name, key string
		says      string
	}{
		{"unknown", policy.MaskKey("never-limited"), fmt.Sprintf(`unknown masked key: none of the 3 keys this server's top tracks (the most limited of the last 5m to 10m) masks to %q; give the key in the clear, or ask the server whose top showed it (400 Bad Request)`, policy.MaskKey("never-limited"))},
		{"ambiguous", policy.MaskKey(colliding[0]), fmt.Sprintf(`ambiguous masked key: 2 keys this server's top tracks mask to %q; give the key in the clear (400 Bad Request)`, policy.MaskKey(colliding[0]))},
	} {
		for _, cmd := range []string{"inspect", "reset"} {
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), []string{cmd, "--rule", "fw", "--key", tt.key, "--server", d.base}, &stdout, &stderr)
			if code != 1 || stdout.Len() != 0 || !strings.Contains(stderr.String(), tt.says) {
				t.Errorf("%s --key of a mask %s: exit %d, stdout %q, stderr %s; want 1 saying %s", cmd, tt.name, code, stdout.String(), stderr.String(), tt.says)
			}
		}
	}
	// Each colliding key in the clear is its own client still.
	if in := inspect(t, d, "fw", colliding[1], 1); in.Allowed || in.Key != colliding[1] {
		t.Errorf("inspect --key %s: %+v, want its own state, denied", colliding[1], in)
	}
}
