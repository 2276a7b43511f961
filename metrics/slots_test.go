package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// slotsRules: two slots per API key for exports, a rate limit without
// slots for pages, and five slots a key for jobs, checked by name (the
// decision service's).
const slotsRules = `
rules:
  - {name: exports, match: /export, key: header:X-API-Key, algorithm: concurrency, limit: 2, ttl: 1h}
  - {name: pages, match: /page, key: header:X-API-Key, limit: 100, period: 1h}
  - {name: jobs, key: request, algorithm: concurrency, limit: 5, ttl: 1h}
`

// TestSlotsHeld: sluice_slots_held{rule}, told by an engine's
// SlotObserver, is each rule's slots held by the middleware's requests in
// flight: at zero for every rule from the first scrape, up by one per
// request admitted under a concurrency limit while its handler runs, not
// for a denied request nor a rule without slots, and down when the
// handler returns or panics. A slot a Check holds (the decision
// service's, held by its client) is in the store, and not counted.
func TestSlotsHeld(t *testing.T) {
	m := metrics.New()
	f, err := config.Parse("test.yaml", []byte(slotsRules))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	e := policy.New(sluice.New(memory.New(), sluice.WithHooks(m.Hooks())), set, policy.WithObserver(m.Decision), policy.WithSlotObserver(m.Slots),
		policy.WithLogger(slog.New(slog.DiscardHandler)))
	m.Rules(func() []string { return []string{"exports", "pages", "jobs"} })
	held := func(want map[string]int) {
		t.Helper()
		var text string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			text = scrape(t, m)
			ok := true
			for rule, n := range want {
				ok = ok && strings.Contains(text, `sluice_slots_held{rule="`+rule+`"} `+strconv.Itoa(n)+"\n")
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				break
			}
		}
		t.Fatalf("want slots held %v, got:\n%s", want, grep(text, "sluice_slots_held{"))
	}
	held(map[string]int{"exports": 0, "pages": 0, "jobs": 0})

	release := make(chan struct{})
	entered := make(chan string, 8)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.String()
		<-release
		if r.URL.Query().Has("panic") {
			panic(http.ErrAbortHandler)
		}
	})
	srv := httptest.NewServer(httplimit.New(e)(next))
	defer srv.Close()
	type answer struct {
		path string
		code int
	}
	answers := make(chan answer, 8)
	get := func(path string) {
		r, _ := http.NewRequest("GET", srv.URL+path, nil)
		r.Header.Set("X-API-Key", "k")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			answers <- answer{path, 0} // the panic's aborted response
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answers <- answer{path, resp.StatusCode}
	}
	// Both slots of exports, and a page, in flight.
	for _, p := range []string{"/export", "/export?panic", "/page"} {
		go get(p)
		<-entered
	}
	held(map[string]int{"exports": 2, "pages": 0})
	// A third export is denied: it holds nothing.
	get("/export")
	if a := <-answers; a.code != http.StatusTooManyRequests {
		t.Fatalf("a third export while two run: %d, want 429", a.code)
	}
	held(map[string]int{"exports": 2})

	// A check of jobs holds a slot in the store, which the decision
	// service's client keeps: no process counts it.
	ctx := context.Background()
	d, err := e.Check(ctx, policy.Check{Rule: "jobs", Key: "j"})
	if err != nil || !d.Allowed {
		t.Fatalf("check jobs: %+v, %v", d, err)
	}
	zero := 0
	if in, err := e.Inspect(ctx, policy.Check{Rule: "jobs", Key: "j", Cost: &zero}); err != nil || in.Limits[0].Result.Remaining != 4 {
		t.Fatalf("jobs after a check: %+v, %v; want 4 of 5 slots free", in, err)
	}
	held(map[string]int{"jobs": 0, "exports": 2})

	// The handlers return, one of them panicking: nothing is held.
	close(release)
	for range 3 {
		<-answers
	}
	held(map[string]int{"exports": 0, "pages": 0, "jobs": 0})
	if strings.Contains(scrape(t, m), `sluice_slots_held{rule="exports"} -`) {
		t.Error("a slot was released twice")
	}
}
