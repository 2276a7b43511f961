//go:build integration

package redis_test

import (
	"context"
	"fmt"
	"testing"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis/goredis"
)

// TestRingStacked: over a go-redis Ring, which shards keys by hash tag on
// the client side, a decision over two client keys that live on different
// servers is split by client key, so each key is counted on its own server:
// where a decision for that client alone finds it.
func TestRingStacked(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := goredislib.NewRing(&goredislib.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	direct := map[string]*goredislib.Client{a.Addr: newGoRedis(t, a.Addr), b.Addr: newGoRedis(t, b.Addr)}
	ctx := context.Background()

	store := goredis.New(ring)
	// Two client keys on different servers: the server that holds a key
	// is the one a single-client decision wrote it to.
	server := func(key string, l sluice.Limit) string {
		t.Helper()
		if _, err := sluice.New(store).Allow(ctx, key, l); err != nil {
			t.Fatal(err)
		}
		for addr, c := range direct {
			if n, _ := c.Exists(ctx, store.Key(key, l)).Result(); n == 1 {
				return addr
			}
		}
		t.Fatalf("no server holds %s", store.Key(key, l))
		return ""
	}
	probe := sluice.PerHour(100).Named("probe")
	first := "client-0"
	home := server(first, probe)
	second := ""
	for i := 1; i < 64 && second == ""; i++ {
		if k := fmt.Sprintf("client-%d", i); server(k, probe) != home {
			second = k
		}
	}
	if second == "" {
		t.Fatal("64 client keys all on one server")
	}

	lim := sluice.New(store)
	l1, l2 := sluice.PerHour(10).Named("stack-1"), sluice.PerHour(10).Named("stack-2")
	if _, err := lim.AllowParts(ctx, sluice.Part{Key: first, Limits: []sluice.Limit{l1}, Cost: 1}, sluice.Part{Key: second, Limits: []sluice.Limit{l2}, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	// Unsplit, the one script would run on the first key's server and
	// write the second client's key there, where no decision of that
	// client alone looks.
	if n, _ := direct[home].Exists(ctx, store.Key(second, l2)).Result(); n != 0 {
		t.Errorf("the second client's key is on the first client's server")
	}
	r, err := lim.AllowN(ctx, second, l2, 0)
	if err != nil || r.Remaining != 9 {
		t.Errorf("the second client alone: %+v, %v; want 9 left (1 of 10 spent)", r, err)
	}
	r, err = lim.AllowN(ctx, first, l1, 0)
	if err != nil || r.Remaining != 9 {
		t.Errorf("the first client alone: %+v, %v; want 9 left (1 of 10 spent)", r, err)
	}
	// A peek over both reads each key on its own server.
	p, err := lim.Peek(ctx, sluice.Part{Key: first, Limits: []sluice.Limit{l1}, Cost: 2}, sluice.Part{Key: second, Limits: []sluice.Limit{l2}, Cost: 3})
	if err != nil || !p.Allowed || p.Results[0].Remaining != 7 || p.Results[1].Remaining != 6 {
		t.Errorf("Peek over both clients: %+v, %v; want allowed with 7 and 6 left", p, err)
	}
	// One the second client's server denies: the peek answers what the
	// decision then gets (each limit's state, nothing spent).
	deny := []sluice.Part{{Key: first, Limits: []sluice.Limit{l1}, Cost: 2}, {Key: second, Limits: []sluice.Limit{l2}, Cost: 10}}
	p, err = lim.Peek(ctx, deny...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim.AllowParts(ctx, deny...)
	if err != nil {
		t.Fatal(err)
	}
	if p.Allowed || d.Allowed {
		t.Errorf("a cost of 10 with 9 left: Peek allowed %v, the decision %v; want both denied", p.Allowed, d.Allowed)
	}
	for i := range d.Results {
		if p.Results[i].Allowed != d.Results[i].Allowed || p.Results[i].Remaining != d.Results[i].Remaining {
			t.Errorf("limit %d: Peek %+v, the decision after it %+v", i, p.Results[i], d.Results[i])
		}
	}
	if p.Results[0].Remaining != 9 || p.Results[1].Remaining != 9 {
		t.Errorf("Peek of the denied request: %+v; want each client's 9 left, as they are", p.Results)
	}
}
