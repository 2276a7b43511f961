//go:build integration

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/redis/goredis"
)

// TestClusterNodes: a store on a Cluster is a sluice.Noder whose nodes
// are the Cluster's masters: every key's node is the master of its slot,
// through rueidis and go-redis; the map follows a slot moved to another
// master; a decision that fails on a dead master is a sluice.NodeError
// naming it, a split decision's says which masters answered before it;
// Ready asks every master, and names the dead one.
func TestClusterNodes(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	rs := redis.FromRueidis(clusterRueidis(t, c), prefix())
	gs := goredis.New(clusterGoRedis(t, c), prefix())
	lim := sluice.PerMinute(100)
	for name, s := range map[string]*redis.Store{"rueidis": rs, "go-redis": gs} {
		if err := s.Ready(readyCtx(t)); err != nil { // also reads the map
			t.Fatalf("%s: Ready with every master up: %v", name, err)
		}
		byMaster := map[string]int{}
		for i := range 200 {
			key := fmt.Sprintf("client-%d", i)
			n := s.Node(key)
			owner := c.Owner(t, c.KeySlot(t, s.Key(key, lim)))
			if got := s.NodeName(n); got != owner {
				t.Fatalf("%s: key %q: node %d named %q, want its slot's master %s", name, key, n, got, owner)
			}
			if prev, ok := byMaster[owner]; ok && prev != n {
				t.Fatalf("%s: master %s is node %d and node %d", name, owner, prev, n)
			}
			byMaster[owner] = n
		}
		if len(byMaster) != len(c.Addrs) || slices.Contains(slices.Collect(maps.Values(byMaster)), 0) {
			t.Errorf("%s: nodes by master %v, want the %d masters each a number of its own, none 0", name, byMaster, len(c.Addrs))
		}
	}

	t.Run("Reshard", func(t *testing.T) {
		key := "moved-client"
		slot := c.KeySlot(t, rs.Key(key, lim))
		from := c.Owner(t, slot)
		to := c.Addrs[(slices.Index(c.Addrs, from)+1)%len(c.Addrs)]
		before, target := rs.Node(key), rs.Node(keyOn(t, rs, to))
		m := c.BeginMigration(t, slot, to)
		m.MoveKeys(t, 100)
		m.Finish(t)
		if err := rs.Ready(readyCtx(t)); err != nil {
			t.Fatal(err)
		}
		if got := rs.Node(key); got != target || got == before || rs.NodeName(got) != to {
			t.Errorf("after slot %d moved from %s (node %d) to %s (node %d): node %d, %q", slot, from, before, to, target, got, rs.NodeName(got))
		}
	})

	outer := t
	t.Run("MasterDown", func(t *testing.T) {
		victim := c.Addrs[0]
		dead, alive := keyOn(t, rs, victim), keyOn(t, rs, c.Addrs[1])
		c.KillNode(t, victim)
		// Back before the node timeout (5s), which would take the Cluster
		// down; its process is stopped when the whole test ends.
		defer c.RestartNode(outer, victim)
		_, err := rs.Take(ctx, sluice.Request{Parts: []sluice.Part{{Key: dead, Limits: []sluice.Limit{lim}, Cost: 1}}})
		var ne *sluice.NodeError
		if !errors.As(err, &ne) || ne.Node != rs.Node(dead) || !strings.Contains(err.Error(), victim) {
			t.Errorf("a decision on the dead master %s (node %d): %v, want a sluice.NodeError of its node naming it", victim, rs.Node(dead), err)
		}
		if _, err := rs.Take(ctx, sluice.Request{Parts: []sluice.Part{{Key: alive, Limits: []sluice.Limit{lim}, Cost: 1}}}); err != nil {
			t.Errorf("a decision on a healthy master: %v", err)
		}
		// A split decision: the healthy master's part first, which
		// answers; then the dead one's.
		_, err = rs.Take(ctx, sluice.Request{Parts: []sluice.Part{
			{Key: alive, Limits: []sluice.Limit{lim.Named("a")}, Cost: 1},
			{Key: dead, Limits: []sluice.Limit{lim.Named("b")}, Cost: 1},
		}})
		if !errors.As(err, &ne) || ne.Node != rs.Node(dead) || !slices.Equal(ne.Answered, []int{rs.Node(alive)}) {
			t.Errorf("a split decision failing on the dead master: %v (%+v), want a NodeError of node %d, node %d answered", err, ne, rs.Node(dead), rs.Node(alive))
		}
		for name, s := range map[string]*redis.Store{"rueidis": rs, "go-redis": gs} {
			// Within a second: go-redis retries the dead master for
			// seconds, and the Cluster fails it after 5.
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			err := s.Ready(rctx)
			cancel()
			var re *redis.ReadyError
			if !errors.As(err, &re) || re.Masters != len(c.Addrs) || !slices.Equal(re.Degraded(), []string{victim}) || !re.Serving() {
				t.Errorf("%s: Ready with %s down: %v (%+v), want a ReadyError naming it alone, the others serving", name, victim, err, re)
				continue
			}
			if !strings.Contains(err.Error(), "1 of 3 masters failing: "+victim) {
				t.Errorf("%s: Ready's error %q does not name the dead master", name, err)
			}
		}
	})

	t.Run("ReadyKeys", func(t *testing.T) {
		var last error
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if last = rs.Ready(readyCtx(t)); last == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Ready 20s after the killed master restarted: %v", last)
			}
		}
		for _, addr := range c.Addrs {
			keys, _ := c.Do(t, addr, "KEYS", "*{%ready*").([]any)
			if len(keys) == 0 {
				t.Errorf("master %s holds no key of Ready's: it was not asked", addr)
			}
		}
	})
}

// keyOn returns a client key that s maps to the master at addr.
func keyOn(t *testing.T, s *redis.Store, addr string) string {
	t.Helper()
	for i := range 10000 {
		if k := fmt.Sprintf("on-%d", i); s.NodeName(s.Node(k)) == addr {
			return k
		}
	}
	t.Fatalf("no key of 10000 on master %s", addr)
	return ""
}

// TestClusterShardsSources: CLUSTER SLOTS, which Shards reads on a server
// without CLUSTER SHARDS, gives the shards CLUSTER SHARDS gives.
func TestClusterShardsSources(t *testing.T) {
	c := redistest.StartCluster(t)
	rc := clusterRueidis(t, c)
	ctx := context.Background()
	shards, err := redis.ShardsOf(rc).Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slots, err := redis.SlotsShards(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := shardSet(shards), shardSet(slots); !maps.Equal(a, b) || len(a) != len(c.Addrs) {
		t.Errorf("CLUSTER SHARDS gives %v, CLUSTER SLOTS %v; want the same %d masters", a, b, len(c.Addrs))
	}
}

// shardSet describes shards by master: their slot ranges and node IDs.
func shardSet(shards []redis.Shard) map[string]string {
	m := map[string]string{}
	for _, s := range shards {
		slots := slices.Clone(s.Slots)
		slices.SortFunc(slots, func(a, b [2]int) int { return a[0] - b[0] })
		ids := slices.Clone(s.IDs)
		slices.Sort(ids)
		m[s.Master] = fmt.Sprint(slots, ids)
	}
	return m
}

// TestShardNumbers: a shard keeps its number when a replica takes over
// (known by its node IDs), or, without IDs, while its master stays; a
// slot moved takes its keys to its new shard's number; a new shard gets a
// new number; a shard without slots is left out.
func TestShardNumbers(t *testing.T) {
	s := redis.Mapped()
	first := s.ApplyShards([]redis.Shard{
		{Master: "a:1", IDs: []string{"A", "A2"}, Slots: [][2]int{{0, 5000}}},
		{Master: "b:1", IDs: []string{"B"}, Slots: [][2]int{{5001, 10000}}},
		{Master: "c:1", Slots: [][2]int{{10001, 16383}}},
	})
	if len(first) != 3 {
		t.Fatalf("numbers %v, want 3", first)
	}
	next := s.ApplyShards([]redis.Shard{
		{Master: "a:2", IDs: []string{"A2", "A"}, Slots: [][2]int{{0, 4999}}}, // A2 promoted
		{Master: "x:9", IDs: []string{"X"}},                                   // no slots
		{Master: "b:1", IDs: []string{"B"}, Slots: [][2]int{{4999, 10000}}},   // took slot 4999
		{Master: "c:1", Slots: [][2]int{{10001, 16000}}},
		{Master: "d:1", IDs: []string{"D"}, Slots: [][2]int{{16001, 16383}}},
	})
	want := map[string]int{"a:2": first["a:1"], "b:1": first["b:1"], "c:1": first["c:1"], "d:1": 4}
	if !maps.Equal(next, want) {
		t.Errorf("numbers after a failover, a slot moved and a new shard: %v, want %v", next, want)
	}
	if got := s.NodeName(first["a:1"]); got != "a:2" {
		t.Errorf("node %d named %q, want its new master a:2", first["a:1"], got)
	}
	for key, master := range map[string]string{keyInSlot(t, 4999): "b:1", keyInSlot(t, 0): "a:2", keyInSlot(t, 16383): "d:1"} {
		if got := s.NodeName(s.Node(key)); got != master {
			t.Errorf("key %q of slot %d: node %d (%q), want %s's", key, redis.Slot("{"+key+"}"), s.Node(key), got, master)
		}
	}
}

// keyInSlot returns a client key whose hash tag falls in slot.
func keyInSlot(t *testing.T, slot int) string {
	t.Helper()
	for i := range 1 << 20 {
		if k := fmt.Sprintf("k%d", i); redis.Slot("{"+k+"}") == slot {
			return k
		}
	}
	t.Fatalf("no key in slot %d", slot)
	return ""
}
