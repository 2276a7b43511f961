//go:build integration

package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/internal/service/server"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/storetest"
)

// budgetRule is a token budget of 100,000 per minute per API key; settle
// is its settle section.
func budgetRule(settle string) string {
	return `
rules:
  - name: tokens
    match: /v1/chat
    key: header:X-API-Key
    algorithm: fixed_window
    limit: 100000
    period: 1m
    settle: ` + settle + "\n"
}

const (
	budget   = 100_000
	reserved = 4096
	workers  = 64 // calls in flight at once
	rounds   = 8  // calls per worker
)

// replica is one sluice process of three sharing a redis-server: its
// engine behind the middleware (in front of an "LLM" that reports the
// tokens it used), the decision service, and Envoy's gRPC on the rules.
type replica struct {
	engine *policy.Engine
	store  *redis.Store
	redis  rueidis.Client
	chat   *httptest.Server // the middleware before the LLM
	api    *httptest.Server // the decision service
	grpc   rlsv3.RateLimitServiceClient
}

// newReplicas starts three replicas of rules on one redis-server, all on
// clock (each decision a microsecond after the last, the whole run inside
// one minute's window).
func newReplicas(t *testing.T, rules string, clock func() time.Time) []*replica {
	t.Helper()
	srv := redistest.Start(t)
	f, err := config.Parse("budget.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	var out []*replica
	for range 3 {
		store, err := redis.Open("redis://" + srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		e := policy.New(sluice.New(store, sluice.WithClock(clock)), set, policy.WithLogger(slog.New(slog.DiscardHandler)))
		llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Tokens-Used")
			_, _ = io.WriteString(w, "data: the answer\n\n")
			w.Header().Set("X-Tokens-Used", r.Header.Get("X-Cost")) // known at the end
		})
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		r := &replica{engine: e, store: store, redis: c, chat: httptest.NewServer(httplimit.New(e)(llm)), api: httptest.NewServer(server.New(e))}
		t.Cleanup(r.chat.Close)
		t.Cleanup(r.api.Close)
		gs := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(gs, envoy.NewRulesService(e))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = gs.Serve(ln) }()
		t.Cleanup(gs.Stop)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		r.grpc = rlsv3.NewRateLimitServiceClient(conn)
		out = append(out, r)
	}
	return out
}

// ticking returns a clock that reads storetest.Epoch plus a microsecond
// more at each call.
func ticking() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return storetest.Epoch.Add(time.Duration(n.Add(1)) * time.Microsecond) }
}

// door is how an LLM call of cost reaches the limiter: it reports whether
// the call was admitted (and then settled at cost).
type door func(t *testing.T, rs []*replica, i, cost int) bool

// viaMiddleware calls the chat route of one replica: the middleware
// reserves, and settles from the trailer the LLM sends at the end.
func viaMiddleware(t *testing.T, rs []*replica, i, cost int) bool {
	req, _ := http.NewRequest("POST", rs[i%3].chat.URL+"/v1/chat", nil)
	req.Header.Set("X-API-Key", "k")
	req.Header.Set("X-Cost", strconv.Itoa(cost))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return false
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode == http.StatusOK
}

// viaSettle checks on one replica and settles the reservation on the
// next, as a client of the decision service behind a load balancer does.
func viaSettle(t *testing.T, rs []*replica, i, cost int) bool {
	post := func(r *replica, path, body string, out any) int {
		res, err := http.Post(r.api.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		defer res.Body.Close()
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Error(err)
		}
		return res.StatusCode
	}
	var check struct {
		Allowed     bool   `json:"allowed"`
		Reservation string `json:"reservation"`
	}
	if post(rs[i%3], "/v1/check", `{"rule":"tokens","key":"k"}`, &check); !check.Allowed {
		return false
	}
	var settled map[string]any
	if code := post(rs[(i+1)%3], "/v1/settle", fmt.Sprintf(`{"reservation":%q,"cost":%d}`, check.Reservation, cost), &settled); code != 200 {
		t.Errorf("settle: %d %v", code, settled)
	}
	return true
}

// viaGRPC spends the reserve as Envoy's hits_addend on one replica and
// gives back what the call did not use with is_negative_hits on the
// next, as an Envoy route does at stream end.
func viaGRPC(t *testing.T, rs []*replica, i, cost int) bool {
	call := func(r *replica, hits int, negative bool) *rlsv3.RateLimitResponse {
		d := &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: envoy.RuleEntry, Value: "tokens"}, {Key: "api_key", Value: "k"}},
			HitsAddend: wrapperspb.UInt64(uint64(hits)), IsNegativeHits: negative}
		res, err := r.grpc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Error(err)
			return &rlsv3.RateLimitResponse{}
		}
		return res
	}
	if call(rs[i%3], reserved, false).OverallCode != rlsv3.RateLimitResponse_OK {
		return false
	}
	if cost < reserved {
		if r := call(rs[(i+1)%3], reserved-cost, true); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("is_negative_hits: %v", r)
		}
	}
	return true
}

// run makes workers × rounds LLM calls of random costs from 10 to 4000
// through the doors in turn, workers at once, and returns the sum of the
// costs of the admitted ones and how many were admitted.
func run(t *testing.T, rs []*replica, doors []door) (spent, admitted int) {
	var wg sync.WaitGroup
	var sum, n atomic.Int64
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 22))
			for k := range rounds {
				i := w*rounds + k
				cost := 10 + rng.IntN(3991)
				if doors[i%len(doors)](t, rs, i/len(doors), cost) {
					sum.Add(int64(cost))
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(sum.Load()), int(n.Load())
}

// drain makes calls after run's, one at a time, through the doors in
// turn, until one is denied, and returns the costs of those admitted.
// With no call in flight beside it, a denial of a reservation of 4096
// means less than 4096 is left: run's own last denials may have come
// while other calls held reservations they then mostly gave back.
func drain(t *testing.T, rs []*replica, doors []door) (spent int) {
	for i := workers * rounds; i < workers*rounds+budget/10; i++ {
		cost := 10 + i%3991
		if !doors[i%len(doors)](t, rs, i/len(doors), cost) {
			return spent
		}
		spent += cost
	}
	t.Fatalf("%d calls after the concurrent ones were all admitted", budget/10)
	return 0
}

// count returns what the key k has spent of the budget, its debt
// included (a Result's Remaining stops at 0): the count of the window's
// state in Redis, the digits before the minute's 9 (see "Values" in
// package redis).
func count(t *testing.T, r *replica) int {
	zero := 0
	d, err := r.engine.Check(context.Background(), policy.Check{Rule: "tokens", Key: "k", Cost: &zero})
	if err != nil {
		t.Fatal(err)
	}
	a := d.Applied[0]
	key := r.store.Key("k:k", a.Limits[0]) // the engine's stored form of a header value
	v, err := r.redis.Do(context.Background(), r.redis.B().Get().Key(key).Build()).ToString()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	n, err := strconv.Atoi(v[:len(v)-9])
	if err != nil {
		t.Fatalf("GET %s: %q", key, v)
	}
	if res := a.Result(); res.Limit-res.Remaining != min(n, budget) {
		t.Fatalf("the state %q counts %d, the engine reports %d remaining", v, n, res.Remaining)
	}
	return n
}

// TestTokenBudget: three replicas on one redis-server hold a key to a
// budget of 100,000 tokens a minute, 64 LLM calls in flight at once, each
// reserving 4096 and using 10 to 4000, through the middleware (settled
// from a trailer), the decision service (reserved on one replica, settled
// on another) and Envoy's gRPC (is_negative_hits), one count for all: the
// count never exceeds the budget and ends at exactly the sum of the
// admitted calls' costs. Post-paid, each call admitted while a token is
// left and charged after, the budget overshoots by at most the costs of
// the calls in flight.
func TestTokenBudget(t *testing.T) {
	t.Run("reserved", func(t *testing.T) {
		rs := newReplicas(t, budgetRule(`{cost_from: "header:X-Tokens-Used", reserve: 4096, strip: true}`), ticking())
		doors := []door{viaMiddleware, viaSettle, viaGRPC}
		spent, admitted := run(t, rs, doors)
		more := drain(t, rs, doors)
		got := count(t, rs[0])
		t.Logf("%d of %d calls admitted, %d tokens spent", admitted, workers*rounds, got)
		if got != spent+more {
			t.Errorf("the count is %d, the admitted calls cost %d: the settles are not exact", got, spent+more)
		}
		if got > budget {
			t.Errorf("the count is %d, over the budget of %d", got, budget)
		}
		if admitted == workers*rounds || got < budget-reserved {
			t.Errorf("%d calls admitted, %d spent: the budget never bound, so the test proves nothing", admitted, got)
		}
	})
	t.Run("postpaid", func(t *testing.T) {
		rs := newReplicas(t, budgetRule(`{cost_from: "header:X-Tokens-Used", postpaid: true}`), ticking())
		spent, admitted := run(t, rs, []door{viaMiddleware, viaSettle})
		got := count(t, rs[0])
		over := got - budget
		t.Logf("%d of %d calls admitted, %d tokens spent: %d over the budget (at most %d calls of at most 4000 in flight)", admitted, workers*rounds, got, over, workers)
		if got != spent {
			t.Errorf("the count is %d, the admitted calls cost %d", got, spent)
		}
		if over > workers*4000 {
			t.Errorf("the budget overshot by %d, beyond the bound of %d (the calls in flight)", over, workers*4000)
		}
		if over <= 0 {
			t.Errorf("the count is %d: the budget never bound, so the test proves nothing", got)
		}
	})
}
