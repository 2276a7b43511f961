//go:build integration

package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/store/redis"
)

// TestBreakerNodes: on a Redis Cluster, a dead master's breaker shows as
// sluice_breaker_node_open{node="<its address>"} 1 and
// sluice_breaker_open 1, while the keys of the other masters are decided
// by Redis; once it is back, 0 and 0.
func TestBreakerNodes(t *testing.T) {
	m := metrics.New()
	c := redistest.StartCluster(t)
	rs, err := redis.Open("redis://" + c.Addrs[1] + "?addr=" + c.Addrs[2])
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if err := rs.Ready(context.Background()); err != nil { // reads the slot map
		t.Fatal(err)
	}
	lim := sluice.New(rs, sluice.WithHooks(m.Hooks()), sluice.WithErrorPolicy(sluice.AllowOnError),
		sluice.WithBreaker(sluice.Breaker{Failures: 2, Span: time.Nanosecond, Probe: time.Millisecond}))
	victim := c.Addrs[0]
	keyOn := map[string]string{} // a client key of each master
	for i := 0; len(keyOn) < len(c.Addrs); i++ {
		k := fmt.Sprintf("k%d", i)
		if addr := rs.NodeName(rs.Node(k)); keyOn[addr] == "" {
			keyOn[addr] = k
		}
	}
	allow := func(key string) sluice.Result {
		r, err := lim.Allow(context.Background(), key, sluice.PerMinute(100))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	c.KillNode(t, victim)
	for deadline := time.Now().Add(10 * time.Second); lim.Breaker() != sluice.BreakerOpen; {
		if time.Now().After(deadline) {
			t.Fatalf("the dead master's breaker did not open: %+v", lim.Breakers())
		}
		allow(keyOn[victim])
	}
	for addr, k := range keyOn {
		if r := allow(k); addr != victim && r.Degraded != sluice.NotDegraded {
			t.Errorf("the key of the healthy master %s degraded", addr)
		}
	}
	text := scrape(t, m)
	for _, want := range []string{`sluice_breaker_node_open{node="` + victim + `"} 1`, "sluice_breaker_open 1", "sluice_breaker_opens_total 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("with master %s down, metrics lack %s", victim, want)
		}
	}
	for _, addr := range c.Addrs[1:] {
		if strings.Contains(text, `sluice_breaker_node_open{node="`+addr+`"} 1`) {
			t.Errorf("the healthy master %s shows as open", addr)
		}
	}
	c.RestartNode(t, victim)
	for deadline := time.Now().Add(30 * time.Second); lim.Breaker() != sluice.BreakerClosed; {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted master's breaker did not close: %+v", lim.Breakers())
		}
		time.Sleep(10 * time.Millisecond)
		allow(keyOn[victim])
	}
	text = scrape(t, m)
	for _, want := range []string{`sluice_breaker_node_open{node="` + victim + `"} 0`, "sluice_breaker_open 0"} {
		if !strings.Contains(text, want) {
			t.Errorf("after master %s came back, metrics lack %s", victim, want)
		}
	}
}
