package sluice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// nodeSwitch is a Noder store of three nodes, each a switchStore that
// fails or hangs on its own: the node of a key is its first byte, '0',
// '1' or '2'. It decides a request's parts node by node, in the order of
// their first part, as the Redis store splits a decision over Cluster
// slots, and fails with a NodeError naming the node that failed and those
// that answered before it; named false, with the error alone.
type nodeSwitch struct {
	unsupported
	nodes [3]*switchStore
	plain bool // fail with the node's error alone, not a NodeError

	mu    sync.Mutex
	looks [][]string // the keys of each request at cost 0 (a probe's)
}

func newNodeSwitch() *nodeSwitch {
	s := &nodeSwitch{}
	for i := range s.nodes {
		s.nodes[i] = &switchStore{}
	}
	return s
}

func (s *nodeSwitch) Node(key string) int { return int(key[0] - '0') }

func (s *nodeSwitch) NodeName(node int) string { return fmt.Sprintf("node-%d", node) }

func (s *nodeSwitch) Take(ctx context.Context, req Request) ([]Result, error) {
	var order []int
	var keys []string
	probe := true
	for _, p := range req.Parts {
		if n := s.Node(p.Key); !slices.Contains(order, n) {
			order = append(order, n)
		}
		keys = append(keys, p.Key)
		probe = probe && p.Cost == 0
	}
	if probe {
		s.mu.Lock()
		s.looks = append(s.looks, keys)
		s.mu.Unlock()
	}
	for i, n := range order {
		sub := Request{Now: req.Now}
		for _, p := range req.Parts {
			if s.Node(p.Key) == n {
				sub.Parts = append(sub.Parts, p)
			}
		}
		if _, err := s.nodes[n].Take(ctx, sub); err != nil {
			if s.plain {
				return nil, err
			}
			return nil, &NodeError{Node: n, Answered: slices.Clone(order[:i]), Err: fmt.Errorf("node-%d: %w", n, err)}
		}
	}
	rs := make([]Result, req.Len())
	for i := range rs {
		rs[i] = Result{Allowed: true, Limit: 10, Remaining: 9}
	}
	return rs, nil
}

func (s *nodeSwitch) Reset(context.Context, string, ...Limit) error { return nil }

// probes returns the keys of each probe the store saw.
func (s *nodeSwitch) probes() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.looks)
}

// states returns the state of lim's breaker of each node it listed.
func states(lim *Limiter) map[int]BreakerState {
	m := map[int]BreakerState{}
	for _, b := range lim.Breakers() {
		m[b.Node] = b.State
	}
	return m
}

// decide asks lim for a request of one part per key, cost 1, and returns
// whether the store decided it (not degraded).
func decide(t *testing.T, lim *Limiter, keys ...string) bool {
	t.Helper()
	parts := make([]Part, len(keys))
	for i, k := range keys {
		parts[i] = Part{Key: k, Limits: []Limit{PerSecond(10).Named("p" + k)}, Cost: 1}
	}
	r, err := lim.AllowParts(context.Background(), parts...)
	if err != nil {
		t.Fatalf("AllowParts(%q): %v", keys, err)
	}
	return r.Results[0].Degraded == NotDegraded
}

// TestBreakerPerNode: over a Noder store, each node has a breaker of its
// own, fed by the decisions and failures of its keys only.
func TestBreakerPerNode(t *testing.T) {
	conf := Breaker{Failures: 3, Span: time.Nanosecond, Probe: time.Hour} // no probe within the test
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s *nodeSwitch, lim *Limiter)
	}{
		{"a node failing degrades its own keys only", func(t *testing.T, s *nodeSwitch, lim *Limiter) {
			s.nodes[1].fail.Store(true)
			for range 10 {
				decide(t, lim, "1k")
				if !decide(t, lim, "0k") || !decide(t, lim, "2k") {
					t.Fatalf("a key of a healthy node degraded while node 1 fails")
				}
			}
			if got := states(lim); got[1] != BreakerOpen || got[0] != BreakerClosed || got[2] != BreakerClosed {
				t.Errorf("breakers %v, want node 1 open, 0 and 2 closed", got)
			}
			if lim.Breaker() != BreakerOpen {
				t.Errorf("Limiter.Breaker() = %s, want open (the worst node's)", lim.Breaker())
			}
			calls := s.nodes[1].calls.Load()
			if decide(t, lim, "1k") || s.nodes[1].calls.Load() != calls {
				t.Errorf("node 1's breaker is open, yet its key reached the store")
			}
		}},
		{"a request over several nodes goes to the store only if each breaker lets it", func(t *testing.T, s *nodeSwitch, lim *Limiter) {
			s.nodes[1].fail.Store(true)
			for range 3 {
				decide(t, lim, "1k")
			}
			calls := s.nodes[0].calls.Load()
			if decide(t, lim, "0k", "1k") || decide(t, lim, "2k", "1k") {
				t.Errorf("a request with a part on node 1, whose breaker is open, was decided by the store")
			}
			if s.nodes[0].calls.Load() != calls {
				t.Errorf("a request refused by node 1's breaker reached node 0")
			}
			if !decide(t, lim, "0k", "2k") {
				t.Errorf("a request on nodes 0 and 2 degraded")
			}
		}},
		{"a failure is charged to the node that failed, the nodes that answered succeed", func(t *testing.T, s *nodeSwitch, lim *Limiter) {
			// Two failures of node 0, then a request that node 0 answers
			// before node 1 fails: node 0's run ends; two more failures do
			// not open it (three in a row would).
			s.nodes[0].fail.Store(true)
			decide(t, lim, "0k")
			decide(t, lim, "0k")
			s.nodes[0].fail.Store(false)
			s.nodes[1].fail.Store(true)
			for range 3 {
				decide(t, lim, "0k", "1k")
			}
			s.nodes[0].fail.Store(true)
			decide(t, lim, "0k")
			decide(t, lim, "0k")
			if got := states(lim); got[0] != BreakerClosed || got[1] != BreakerOpen {
				t.Errorf("breakers %v, want node 0 closed (it answered between its failures), node 1 open", got)
			}
		}},
		{"an error that names no node is charged to every node of the request", func(t *testing.T, s *nodeSwitch, lim *Limiter) {
			s.plain = true
			s.nodes[1].fail.Store(true)
			for range 3 {
				decide(t, lim, "0k", "1k")
			}
			if got := states(lim); got[0] != BreakerOpen || got[1] != BreakerOpen {
				t.Errorf("breakers %v, want nodes 0 and 1 open", got)
			}
			if !decide(t, lim, "2k") {
				t.Errorf("node 2's key degraded")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newNodeSwitch()
			var ch changes
			lim := New(s, WithErrorPolicy(AllowOnError), WithBreaker(conf), WithHooks(Hooks{Breaker: ch.handle}))
			tc.run(t, s, lim)
			ch.mu.Lock()
			defer ch.mu.Unlock()
			for i, n := range ch.nodes {
				if ch.got[i] == BreakerOpen && states(lim)[n] == BreakerClosed {
					t.Errorf("the handler was told node %d opened, but it is closed", n)
				}
			}
		})
	}
}

// TestBreakerPerNodeReports: a change is reported with its node's number
// and name; Breakers lists each node decided on, with its name; a node's
// probe carries the parts of that node only, and closes its breaker alone.
func TestBreakerPerNodeReports(t *testing.T) {
	s := newNodeSwitch()
	var mu sync.Mutex
	var got []NodeBreaker
	conf := Breaker{Failures: 2, Span: time.Nanosecond, Probe: time.Millisecond}
	lim := New(s, WithErrorPolicy(AllowOnError), WithBreaker(conf), WithHooks(Hooks{Breaker: func(ch NodeBreaker) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ch)
	}}))
	s.nodes[2].fail.Store(true)
	for range 2 {
		decide(t, lim, "0k", "2k")
	}
	waitProbe(conf)
	decide(t, lim, "0k", "2k") // refused by node 2's breaker: sends its probe
	s.nodes[2].fail.Store(false)
	// The probe closes the breaker, then tells the handler: wait for
	// both.
	told := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for states(lim)[2] != BreakerClosed || told() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("node 2's breaker %s, the handler told %d changes, 10s after its node came back", states(lim)[2], told())
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Node != 2 || got[0].Name != "node-2" || got[0].State != BreakerOpen || got[0].Err == nil ||
		got[1].Node != 2 || got[1].State != BreakerClosed || got[1].Err != nil {
		t.Errorf("handler told %+v, want node-2 open with its error, then closed", got)
	}
	if !errors.Is(got[0].Err, errDown) {
		t.Errorf("the opening's error %v does not wrap the store's", got[0].Err)
	}
	want := []NodeBreaker{{Node: 0, Name: "node-0", State: BreakerClosed}, {Node: 2, Name: "node-2", State: BreakerClosed}}
	if bs := lim.Breakers(); !slices.Equal(bs, want) {
		t.Errorf("Breakers() = %+v, want %+v", bs, want)
	}
	probes := s.probes()
	if len(probes) == 0 {
		t.Fatal("no probe reached the store")
	}
	for _, keys := range probes {
		if !slices.Equal(keys, []string{"2k"}) {
			t.Errorf("a probe of node 2 carried %q, want its part alone", keys)
		}
	}
}

// TestBreakerNodeBounds: a node out of range is node 0's; a store that
// is no Noder has node 0 alone, unnamed.
func TestBreakerNodeBounds(t *testing.T) {
	lim := New(&switchStore{}, WithErrorPolicy(AllowOnError))
	if bs := lim.Breakers(); len(bs) != 1 || bs[0] != (NodeBreaker{Node: 0, State: BreakerClosed}) {
		t.Errorf("Breakers() of a store that is no Noder = %+v, want node 0 alone", bs)
	}
	b := newBreakers(Breaker{}, nil, nil)
	for _, n := range []int{-1, MaxNodes, math.MaxInt} {
		if got := b.get(n); got.node != 0 {
			t.Errorf("node %d: breaker of node %d, want 0", n, got.node)
		}
	}
	if got := b.get(MaxNodes - 1); got.node != MaxNodes-1 {
		t.Errorf("node %d: breaker of node %d", MaxNodes-1, got.node)
	}
	if New(&switchStore{}).Breakers() != nil {
		t.Errorf("a Limiter without breakers lists some")
	}
}
