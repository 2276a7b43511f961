package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/testing/testutil"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/storetest"
)

// slotsYAML allows two requests in flight per API key, and 1000 an hour.
const slotsYAML = `
rules:
  - name: exports
    key: header:X-API-Key
    limits:
      - {algorithm: concurrency, limit: 2, ttl: 1h}
      - {algorithm: fixed_window, limit: 1000, period: 1h}
`

// TestSlots: the middleware holds a slot of a concurrency limit while the
// handler runs, and releases it when the handler returns, panics, or
// closes the connection it hijacked; a request while every slot is held
// gets 429, and the rate limit beside the slots keeps every admitted
// request's count.
func TestSlots(t *testing.T) {
	clock := storetest.NewClock()
	e := policy.New(newLimiter(clock), compile(t, slotsYAML), quiet)
	release := make(chan struct{})
	entered := make(chan string, 8)
	var admitted atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		admitted.Add(1)
		entered <- r.URL.Path
		switch r.URL.Path {
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/hijack":
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			go func() {
				<-release
				_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
				c.Close()
			}()
			return // the handler is done; the connection is not
		}
		<-release
	})
	srv := httptest.NewServer(httplimit.New(e, httplimit.WithClock(clock.Now))(next))
	defer srv.Close()
	get := func(path string) (*http.Response, error) {
		r, _ := http.NewRequest("GET", srv.URL+path, nil)
		r.Header.Set("X-API-Key", "k")
		res, err := http.DefaultClient.Do(r)
		if err == nil {
			_, _ = io.ReadAll(res.Body)
			res.Body.Close()
		}
		return res, err
	}
	inFlight := func() int {
		zero := 0
		d, err := e.Check(context.Background(), policy.Check{Rule: "exports", Key: "k", Cost: &zero})
		if err != nil {
			t.Fatal(err)
		}
		return 2 - d.Applied[0].Results[0].Remaining
	}
	// Two slow requests hold both slots.
	done := make(chan *http.Response, 2)
	for range 2 {
		go func() {
			res, err := get("/slow")
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		<-entered
	}
	if n := inFlight(); n != 2 {
		t.Fatalf("%d slots held by two requests in their handler, want 2", n)
	}
	res, err := get("/slow")
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a third request in flight: %d, want 429", res.StatusCode)
	}
	if p := res.Header.Get("RateLimit-Policy"); !strings.Contains(p, `"exports-concurrent";q=2;qu="concurrent-requests"`) || !strings.Contains(p, `"exports-1h";q=1000;w=3600`) {
		t.Errorf("RateLimit-Policy: %s", p)
	}
	close(release)
	for range 2 {
		if res := <-done; res == nil || res.StatusCode != http.StatusOK {
			t.Fatalf("a slow request: %v", res)
		}
	}
	waitFor(t, func() bool { return inFlight() == 0 }, "the slots released once the handlers returned")
	// A handler that panics releases its slot.
	if _, err := get("/panic"); err == nil {
		t.Error("a handler that panics: a response")
	}
	<-entered
	waitFor(t, func() bool { return inFlight() == 0 }, "the slot released after a panic")
	// A hijacked connection holds its slot until it is closed.
	release = make(chan struct{})
	hijacked := make(chan *http.Response, 1)
	go func() {
		res, err := get("/hijack")
		if err != nil {
			t.Error(err)
		}
		hijacked <- res
	}()
	<-entered
	waitFor(t, func() bool { return inFlight() == 1 }, "the hijacked connection's slot held")
	close(release)
	if res := <-hijacked; res == nil || res.StatusCode != http.StatusNoContent {
		t.Fatalf("the hijacked connection's answer: %v", res)
	}
	waitFor(t, func() bool { return inFlight() == 0 }, "the slot released once the hijacked connection closed")
	// Every admitted request counted in the rate limit, and the denied
	// one spent nothing. (The client may retry the request whose
	// connection the panic aborted: every one the handler saw counts.)
	zero := 0
	d, err := e.Check(context.Background(), policy.Check{Rule: "exports", Key: "k", Cost: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Applied[0].Results[1].Remaining, 1000-int(admitted.Load()); got != want {
		t.Errorf("the rate limit has %d left after %d requests reached the handler, want %d", got, admitted.Load(), want)
	}
}

// waitFor polls cond until it holds, failing t with what after 10s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	testutil.Until(t, 10*time.Second, what, cond)
}

// TestSlotsRetryAfter: a denial by a concurrency limit suggests the wait
// until the oldest lease could end, unless the rule's retry_after says
// sooner; a rate limit denying too keeps its own, longer wait.
func TestSlotsRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"the lease", "rules:\n  - {name: jobs, key: global, algorithm: concurrency, limit: 1, ttl: 30s}\n", "30"},
		{"the hint", "rules:\n  - {name: jobs, key: global, algorithm: concurrency, limit: 1, ttl: 30s, retry_after: 2s}\n", "2"},
		{"a rate limit's longer wait", "rules:\n  - name: jobs\n    key: global\n    retry_after: 2s\n    limits:\n      - {algorithm: concurrency, limit: 1, ttl: 30s}\n      - {algorithm: fixed_window, limit: 1, period: 1h}\n", "3600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			e := policy.New(newLimiter(clock), compile(t, tc.yaml), quiet)
			release := make(chan struct{})
			entered := make(chan struct{})
			h := httplimit.New(e, httplimit.WithClock(clock.Now))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				entered <- struct{}{}
				<-release
			}))
			done := make(chan struct{})
			go func() {
				defer close(done)
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			}()
			<-entered // the one slot is held
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != tc.want {
				t.Errorf("with the slot held: %d, Retry-After %q; want 429 after %s", w.Code, w.Header().Get("Retry-After"), tc.want)
			}
			close(release)
			<-done
		})
	}
}
