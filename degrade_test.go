package sluice_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// downStore is a store that is down: every call fails (Take and Reset
// as a store that cannot reach its server, the others unsupported).
type downStore struct{ sluice.Unsupported }

func (downStore) Take(context.Context, sluice.Request) ([]sluice.Result, error) {
	return nil, errors.New("connection refused")
}

func (downStore) Reset(context.Context, string, ...sluice.Limit) error {
	return errors.New("connection refused")
}

// TestPartErrorPolicy: each part is answered by its own error policy, or
// the Limiter's; a part under deny denies the request and then the local
// parts are only looked at, so a denied request consumes nothing; a part
// under return fails the request.
func TestPartErrorPolicy(t *testing.T) {
	lim10 := sluice.PerMinute(10)
	for _, tt := range []struct {
		name    string
		limiter sluice.ErrorPolicy
		parts   []sluice.ErrorPolicy
		allowed bool
		want    []sluice.Degradation
		err     bool
		spent   int // of the local part's 10, after the decision
	}{
		{"the limiter's", sluice.AllowOnError, []sluice.ErrorPolicy{{}, {}}, true,
			[]sluice.Degradation{sluice.DegradedAllow, sluice.DegradedAllow}, false, 0},
		{"login fails closed", sluice.AllowOnError, []sluice.ErrorPolicy{{}, sluice.DenyOnError}, false,
			[]sluice.Degradation{sluice.DegradedAllow, sluice.DegradedDeny}, false, 0},
		{"local and allow", sluice.AllowOnError, []sluice.ErrorPolicy{sluice.LocalOnError(nil), {}}, true,
			[]sluice.Degradation{sluice.DegradedLocal, sluice.DegradedAllow}, false, 1},
		{"local, denied by another", sluice.AllowOnError, []sluice.ErrorPolicy{sluice.LocalOnError(nil), sluice.DenyOnError}, false,
			[]sluice.Degradation{sluice.DegradedLocal, sluice.DegradedDeny}, false, 0},
		{"a part returns errors", sluice.DenyOnError, []sluice.ErrorPolicy{{}, sluice.ReturnErrors}, false, nil, true, 0},
		{"allow under a limiter that returns errors", sluice.ReturnErrors, []sluice.ErrorPolicy{sluice.AllowOnError, sluice.AllowOnError}, true,
			[]sluice.Degradation{sluice.DegradedAllow, sluice.DegradedAllow}, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fallback := memory.New()
			policy, err := sluice.ParseErrorPolicy(tt.limiter.String(), fallback)
			if err != nil {
				t.Fatal(err)
			}
			lim := sluice.New(downStore{}, sluice.WithErrorPolicy(policy))
			parts := make([]sluice.Part, len(tt.parts))
			for i, p := range tt.parts {
				parts[i] = sluice.Part{Key: "k" + string(rune('a'+i)), Limits: []sluice.Limit{lim10}, Cost: 1, OnError: p}
			}
			res, err := lim.AllowParts(context.Background(), parts...)
			if tt.err {
				if err == nil {
					t.Fatalf("AllowParts = %+v, want the store's error", res)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed != tt.allowed {
				t.Errorf("Allowed = %v, want %v", res.Allowed, tt.allowed)
			}
			for i, r := range res.Results {
				if r.Degraded != tt.want[i] {
					t.Errorf("part %d: Degraded %v, want %v", i, r.Degraded, tt.want[i])
				}
			}
			look, err := fallback.Take(context.Background(), sluice.Request{Parts: []sluice.Part{{Key: "ka", Limits: []sluice.Limit{lim10}}}})
			if err != nil {
				t.Fatal(err)
			}
			if spent := 10 - look[0].Remaining; spent != tt.spent {
				t.Errorf("the local part spent %d of the fallback's 10, want %d", spent, tt.spent)
			}
		})
	}
}

// TestLocalShare: with WithReplicas, the fallback enforces each limit's
// share, Limit / replicas (at least 1, at least the cost), and keeps the
// state it had when the number of replicas changes.
func TestLocalShare(t *testing.T) {
	replicas := 4
	lim := sluice.New(downStore{}, sluice.WithErrorPolicy(sluice.LocalOnError(memory.New())),
		sluice.WithReplicas(func() int { return replicas }))
	ctx := context.Background()
	admitted := func(key string, limit sluice.Limit, cost, n int) int {
		got := 0
		for range n {
			r, err := lim.AllowN(ctx, key, limit, cost)
			if err != nil {
				t.Fatal(err)
			}
			if r.Degraded != sluice.DegradedLocal {
				t.Fatalf("Degraded %v, want local", r.Degraded)
			}
			if r.Allowed {
				got += cost
			}
		}
		return got
	}
	for _, tt := range []struct {
		name  string
		limit sluice.Limit
		cost  int
		want  int
	}{
		{"token bucket", sluice.PerHour(100), 1, 25},
		{"burst", sluice.PerHour(100).WithBurst(40), 1, 10},
		{"fixed window", sluice.PerHour(100).Using(sluice.FixedWindow), 1, 25},
		{"gcra", sluice.PerHour(10).Using(sluice.GCRA), 1, 2},
		{"fewer than replicas", sluice.PerHour(3).Using(sluice.SlidingWindow), 1, 1},
		{"a cost above the share", sluice.PerHour(100).Using(sluice.FixedWindow), 30, 30},
	} {
		if got := admitted(tt.name, tt.limit, tt.cost, 100); got != tt.want {
			t.Errorf("%s: %v on 4 replicas admitted %d locally, want %d", tt.name, tt.limit, got, tt.want)
		}
	}
	// Two replicas leave: the share grows, and what was spent stays spent.
	replicas = 2
	if got := admitted("token bucket", sluice.PerHour(100), 1, 100); got != 25 {
		t.Errorf("on 2 replicas after 25 spent of a 25 share: admitted %d more, want 25 (a 50 share)", got)
	}
}
