package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/storetest"
)

// The shedding tests' pool: poolSize units shared by every client, of
// which the critical class keeps 20% (share is what the other classes
// may use), flooded by non-critical requests at ten times its capacity
// while critical ones arrive at 15% of it.
const (
	poolSize  = 20
	share     = poolSize * 80 / 100 // what the classes below critical may use
	flood     = 10 * poolSize       // non-critical requests at once
	criticals = poolSize * 15 / 100 // critical requests at once
)

// shedRule returns a policy file of one rule, pool, keyed by global
// (every request draws on one pool) with limits, and, when shed, a
// priority section that gives a request the class its X-Priority header
// names and keeps 20% for the critical class; every other request is in
// the lowest class, bulk.
func shedRule(limits string, shed bool) string {
	yaml := "rules:\n  - name: pool\n    key: global\n    limits:\n      - " + limits + "\n"
	if shed {
		yaml += "    priority:\n      from: header:X-Priority\n      reserve: {critical: 20%}\n      default: bulk\n"
	}
	return yaml
}

// shedRows are the shedding tests' rows: the pool with its priority
// section, and a control without it, where the same flood takes the
// whole pool and the critical requests are refused. The control shows
// that the harness can fail: the bounds the first row asserts are
// broken when nothing sheds.
var shedRows = []struct {
	name string
	shed bool
}{
	{"priority", true},
	{"control without priority", false},
}

// classOf returns the class of a request the pool's handler sees.
func classOf(r *http.Request) string {
	if r.Header.Get("X-Priority") == "critical" {
		return "critical"
	}
	return "bulk"
}

// poolCall sends one request through h and returns the answer: a
// critical one, or a non-critical one that names no class (even i) or a
// class the rule does not have (odd i), both in the lowest class.
func poolCall(h http.Handler, critical bool, i int) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/work", nil)
	switch {
	case critical:
		r.Header.Set("X-Priority", "critical")
	case i%2 == 1:
		r.Header.Set("X-Priority", "batch")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// shedError says what is wrong with w as the answer to a request of
// class that was shed, or returns "": 503, code SHED, and a message
// naming the class.
func shedError(w *httptest.ResponseRecorder, class string) string {
	var body struct {
		Error struct{ Code, Message string }
	}
	if w.Code != http.StatusServiceUnavailable || json.Unmarshal(w.Body.Bytes(), &body) != nil ||
		body.Error.Code != "SHED" || !strings.Contains(body.Error.Message, fmt.Sprintf("class %q", class)) {
		return fmt.Sprintf("%d %s; want 503 SHED naming class %q", w.Code, strings.TrimSpace(w.Body.String()), class)
	}
	return ""
}

// deniedError says what is wrong with w as an ordinary denial, or
// returns "": 429, code RATE_LIMITED, as every denial of the highest
// class is, and every denial of a rule without priority.
func deniedError(w *httptest.ResponseRecorder) string {
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"code":"RATE_LIMITED"`) {
		return fmt.Sprintf("%d %s; want 429 RATE_LIMITED", w.Code, strings.TrimSpace(w.Body.String()))
	}
	return ""
}

// peak is a count of requests in flight and the most it has been.
type peak struct{ now, max atomic.Int64 }

// enter counts one request more in flight.
func (p *peak) enter() {
	n := p.now.Add(1)
	for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
	}
}

// leave counts one request less in flight.
func (p *peak) leave() { p.now.Add(-1) }

// holder is the handler of the concurrency pool: it counts the
// non-critical requests in flight, tells entered of each request's class
// as it starts, and holds it (so its slot) until release is closed.
type holder struct {
	bulk    peak
	entered chan string
	release chan struct{} // replaced between waves, while no request runs
}

func (h *holder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	class := classOf(r)
	if class != "critical" {
		h.bulk.enter()
		defer h.bulk.leave()
	}
	h.entered <- class
	<-h.release
}

// TestShedConcurrency: a concurrency limit of poolSize slots whose
// critical class keeps 20%, flooded in waves by flood non-critical
// requests at once that hold their slots until the test lets them go:
// exactly share of them are in flight at once, never more (counted by
// the handler itself), and every other one is shed, 503 SHED naming its
// class; while they hold share slots, criticals critical requests are
// each admitted, and so is one more, up to the pool's capacity, beyond
// which a critical request is denied as an ordinary one (429). Without
// the priority section (the control) the flood takes all poolSize slots
// and the critical requests are refused. Then, under churn (handlers
// that return at once, in loops), the non-critical requests in flight
// still never exceed share, and every critical request is admitted: at
// most share slots held by the lower class and criticals by the critical
// one leave a slot free for each critical request.
//
// Nothing waits on time: a wave is over when each of its requests has
// either reached the handler or been answered, which every one does
// while the held slots are held.
func TestShedConcurrency(t *testing.T) {
	for _, tt := range shedRows {
		t.Run(tt.name, func(t *testing.T) {
			clock := storetest.NewClock() // stands still: no lease ends
			e := policy.New(newLimiter(clock), compile(t, shedRule(fmt.Sprintf("{algorithm: concurrency, limit: %d, ttl: 1h}", poolSize), tt.shed)), quiet)
			hold := &holder{entered: make(chan string, flood+poolSize)}
			h := httplimit.New(e, httplimit.WithClock(clock.Now))(hold)
			free := func() int {
				// Asked as the highest class, whose limit is the whole
				// pool (a lower class's Remaining counts from its share).
				zero := 0
				d, err := e.Check(context.Background(), policy.Check{Rule: "pool", Class: "critical", Cost: &zero})
				if err != nil {
					t.Fatal(err)
				}
				return d.Applied[0].Results[0].Remaining
			}
			wantBulk := poolSize // the control: the flood takes every slot
			if tt.shed {
				wantBulk = share
			}
			for wave := range 3 {
				hold.release = make(chan struct{})
				var wg sync.WaitGroup
				answers := make(chan *httptest.ResponseRecorder, flood+poolSize)
				send := func(critical bool, i int) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						answers <- poolCall(h, critical, i)
					}()
				}
				// wait waits for n requests to reach the handler or be
				// answered, and returns how many of each class entered
				// and the answers.
				wait := func(n int) (entered map[string]int, answered []*httptest.ResponseRecorder) {
					entered = map[string]int{}
					for range n {
						select {
						case c := <-hold.entered:
							entered[c]++
						case w := <-answers:
							answered = append(answered, w)
						}
					}
					return entered, answered
				}

				for i := range flood {
					send(false, i)
				}
				entered, shed := wait(flood)
				if got := entered["bulk"]; got != wantBulk {
					t.Errorf("wave %d: %d of %d non-critical requests admitted at once, want %d", wave, got, flood, wantBulk)
				}
				for _, w := range shed {
					msg := deniedError(w)
					if tt.shed {
						msg = shedError(w, "bulk")
					}
					if msg != "" {
						t.Fatalf("wave %d: a non-critical request beyond the pool: %s", wave, msg)
					}
				}

				for i := range criticals {
					send(true, i)
				}
				entered, refused := wait(criticals)
				if tt.shed {
					if got := entered["critical"]; got != criticals {
						t.Errorf("wave %d: %d of %d critical requests admitted with %d slots held by the flood, want all", wave, got, criticals, share)
					}
					// The pool holds share+criticals: the lower class
					// is shed still, the critical class has the rest.
					send(false, 0)
					if _, ans := wait(1); len(ans) != 1 || shedError(ans[0], "bulk") != "" {
						t.Errorf("wave %d: a non-critical request with the critical class in flight: %v", wave, ans)
					}
					for range poolSize - share - criticals {
						send(true, 0)
					}
					if entered, _ := wait(poolSize - share - criticals); entered["critical"] != poolSize-share-criticals {
						t.Errorf("wave %d: critical requests up to the pool's capacity: %d of %d admitted", wave, entered["critical"], poolSize-share-criticals)
					}
					send(true, 0)
					if _, ans := wait(1); len(ans) != 1 || deniedError(ans[0]) != "" {
						t.Errorf("wave %d: a critical request with the pool full: %v, want an ordinary denial", wave, ans)
					}
				} else {
					if len(refused) != criticals {
						t.Errorf("control, wave %d: %d of %d critical requests refused with the pool full, want all", wave, len(refused), criticals)
					}
					for _, w := range refused {
						if msg := deniedError(w); msg != "" {
							t.Errorf("control, wave %d: a critical request: %s", wave, msg)
						}
					}
				}
				if got := hold.bulk.max.Load(); got > int64(wantBulk) {
					t.Errorf("wave %d: %d non-critical requests in flight at once, want at most %d", wave, got, wantBulk)
				}

				close(hold.release)
				wg.Wait()
				close(answers)
				for w := range answers {
					if w.Code != http.StatusOK && w.Code != http.StatusServiceUnavailable && w.Code != http.StatusTooManyRequests {
						t.Errorf("wave %d: a request answered %d %s", wave, w.Code, w.Body)
					}
				}
				// The middleware releases a slot before the call
				// returns: the next wave starts from an empty pool.
				if got := free(); got != poolSize {
					t.Fatalf("wave %d: %d slots free once every request returned, want %d", wave, got, poolSize)
				}
			}
			if got := hold.bulk.max.Load(); got != int64(wantBulk) {
				t.Errorf("most non-critical requests in flight at once: %d, want %d", got, wantBulk)
			}
			if tt.shed {
				churn(t, e, clock)
			}
		})
	}
}

// churn floods the pool of e with non-critical requests whose handler
// returns at once, from flood goroutines in loops, while criticals
// goroutines send critical requests in loops, and checks the invariants
// that hold whatever the interleaving: the non-critical requests in
// flight never exceed share, every non-critical denial is a shed, and
// every critical request is admitted.
func churn(t *testing.T, e *policy.Engine, clock *storetest.Clock) {
	t.Helper()
	const rounds = 10
	var bulk peak
	var criticalIn atomic.Int64
	h := httplimit.New(e, httplimit.WithClock(clock.Now))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if classOf(r) == "critical" {
			criticalIn.Add(1)
			return
		}
		bulk.enter()
		runtime.Gosched() // let others in while this one is in flight
		bulk.leave()
	}))
	var wg sync.WaitGroup
	bad := make(chan string, flood+criticals)
	for g := range flood + criticals {
		critical := g >= flood
		wg.Go(func() {
			for range rounds {
				w := poolCall(h, critical, g)
				var msg string
				switch {
				case critical && w.Code != http.StatusOK:
					msg = fmt.Sprintf("a critical request under churn: %d %s, want it admitted", w.Code, strings.TrimSpace(w.Body.String()))
				case !critical && w.Code != http.StatusOK:
					msg = shedError(w, "bulk")
				}
				if msg != "" {
					bad <- msg
					return
				}
			}
		})
	}
	wg.Wait()
	close(bad)
	for msg := range bad {
		t.Error(msg)
	}
	if got := bulk.max.Load(); got > share {
		t.Errorf("under churn: %d non-critical requests in flight at once, want at most %d", got, share)
	}
	if got := criticalIn.Load(); got != criticals*rounds {
		t.Errorf("under churn: %d critical requests reached the handler, want %d", got, criticals*rounds)
	}
}

// TestShedRate: a fixed window of 100 requests an hour whose critical
// class keeps 20%, flooded by flood goroutines of 5 non-critical
// requests each while criticals goroutines send 5 critical ones each,
// all at once: the non-critical requests get at most 80 (and, since the
// flood outlasts the window, 80 less those critical requests admitted
// before they ran out, so at least 80 less all of them), every other one
// is shed, 503 SHED naming its class, and every critical request is
// admitted. Then critical requests, one at a time, get the rest of the
// window: 100 admitted in all, and the next one is an ordinary denial
// (429). Without the priority section (the control) the flood gets more
// than 80 and its denials are 429.
func TestShedRate(t *testing.T) {
	const (
		window = 5 * poolSize // requests an hour
		each   = 5            // requests per goroutine
	)
	for _, tt := range shedRows {
		t.Run(tt.name, func(t *testing.T) {
			clock := storetest.NewClock() // stands still: one window
			e := policy.New(newLimiter(clock), compile(t, shedRule(fmt.Sprintf("{algorithm: fixed_window, limit: %d, period: 1h}", window), tt.shed)), quiet)
			var admitted [2]atomic.Int64 // by class: bulk, critical
			h := httplimit.New(e, httplimit.WithClock(clock.Now))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if classOf(r) == "critical" {
					admitted[1].Add(1)
				} else {
					admitted[0].Add(1)
				}
			}))
			start := make(chan struct{})
			var wg sync.WaitGroup
			bad := make(chan string, flood+criticals)
			for g := range flood + criticals {
				critical := g >= flood
				wg.Go(func() {
					<-start
					for range each {
						w := poolCall(h, critical, g)
						if w.Code == http.StatusOK {
							continue
						}
						var msg string
						switch {
						case critical && tt.shed:
							msg = fmt.Sprintf("a critical request: %d %s, want it admitted", w.Code, strings.TrimSpace(w.Body.String()))
						case tt.shed:
							msg = shedError(w, "bulk")
						default:
							msg = deniedError(w)
						}
						if msg != "" {
							bad <- msg
							return
						}
					}
				})
			}
			close(start)
			wg.Wait()
			close(bad)
			for msg := range bad {
				t.Error(msg)
			}
			bulk, critical := int(admitted[0].Load()), int(admitted[1].Load())
			if !tt.shed {
				if bulk <= window*80/100 {
					t.Errorf("control: the flood got %d of %d, want more than the 80%% it gets under priority", bulk, window)
				}
				return
			}
			if lo, hi := window*80/100-criticals*each, window*80/100; bulk < lo || bulk > hi {
				t.Errorf("the non-critical requests got %d of %d, want %d to %d", bulk, window, lo, hi)
			}
			if critical != criticals*each {
				t.Errorf("%d of %d critical requests admitted, want all", critical, criticals*each)
			}
			// The critical class has the rest of the window, and no more.
			rest := window - bulk - critical
			for i := range rest {
				if w := poolCall(h, true, 0); w.Code != http.StatusOK {
					t.Fatalf("critical request %d of the %d left in the window: %d %s", i+1, rest, w.Code, w.Body)
				}
			}
			if msg := deniedError(poolCall(h, true, 0)); msg != "" {
				t.Errorf("a critical request with the window spent: %s", msg)
			}
			if msg := shedError(poolCall(h, false, 0), "bulk"); msg != "" {
				t.Errorf("a non-critical request with the window spent: %s", msg)
			}
		})
	}
}

// TestShedByPlan: a pool shared by every client takes its classes from
// the plans of another rule, keyed by API key: the clients on the pro
// plan keep 30% of the pool, the others are shed at 70%.
func TestShedByPlan(t *testing.T) {
	clock := storetest.NewClock() // stands still: one window
	e := policy.New(newLimiter(clock), compile(t, `
rules:
  - name: api
    key: header:X-Api-Key
    limit: 1000
    period: 1h
    plans: [{name: pro, prefixes: [sk_pro_], limit: 1000, period: 1h}]
  - name: pool
    group: shedding
    key: global
    algorithm: fixed_window
    limit: 10
    period: 1h
    priority: {plan: api, reserve: {pro: 30%}}
`), quiet)
	h := httplimit.New(e, httplimit.WithClock(clock.Now))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	call := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/work", nil)
		r.Header.Set("X-Api-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 7 {
		if w := call(fmt.Sprintf("free-%d", i)); w.Code != http.StatusOK {
			t.Fatalf("free request %d: %d %s", i+1, w.Code, w.Body)
		}
	}
	if w := call("free-7"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"SHED"`) || !strings.Contains(w.Body.String(), `class \"default\"`) {
		t.Errorf("a free request past 70%%: %d %s, want 503 SHED of class default", w.Code, w.Body)
	}
	for i := range 3 {
		if w := call(fmt.Sprintf("sk_pro_%d", i)); w.Code != http.StatusOK {
			t.Errorf("pro request %d in the reserve: %d %s", i+1, w.Code, w.Body)
		}
	}
	if w := call("sk_pro_9"); w.Code != http.StatusTooManyRequests {
		t.Errorf("a pro request with the pool full: %d %s, want an ordinary 429", w.Code, w.Body)
	}
}
