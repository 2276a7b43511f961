//go:build integration

package redis_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/internal/testing/toxitest"
	"github.com/sluice-go/sluice/store/redis"
)

// TestCoalesceFarRedis: with Redis far away (its replies 5s late, through
// toxiproxy's latency toxic) and MaxInFlight script calls in flight, a
// decision that queues with a deadline is sent before any of them returns
// (a tenth of its time to the deadline after it queued), not when one
// returns. Otherwise a queued decision waits a round trip for a call to
// return and then one for its own: with Redis 50ms away and the default
// store deadline of 100ms, most queued decisions missed their deadline
// although every call took 50ms (cmd/sluice TestNetLatency).
func TestCoalesceFarRedis(t *testing.T) {
	srv := redistest.Start(t)
	tp := toxitest.Start(t)
	p := tp.Proxy(t, "redis", srv.Addr)
	admin := newRueidis(t, srv.Addr) // not through the proxy
	store := redis.FromRueidis(newRueidis(t, p.Addr), prefix())
	ctx := context.Background()
	// Each key's connection open (a new one's handshake would wait for
	// the latency), the scripts loaded; cost 0 writes no key.
	for i := range redis.MaxInFlight {
		if _, err := store.Take(ctx, one("inflight"+strconv.Itoa(i), 0)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Take(ctx, one("hasty", 0)); err != nil {
		t.Fatal(err)
	}
	latency := p.Add(t, toxitest.Toxic{Type: "latency", Attributes: map[string]any{"latency": 5000}})
	released := false
	release := func() {
		if !released {
			released = true
			p.Remove(t, latency)
		}
	}
	defer release()

	exists := func(key string) bool {
		n, err := admin.Do(ctx, admin.B().Exists().Key(store.Key(key, window)).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	inflight := make(chan error, redis.MaxInFlight)
	for i := range redis.MaxInFlight {
		go func() {
			_, err := store.Take(ctx, one("inflight"+strconv.Itoa(i), 1))
			inflight <- err
		}()
	}
	eventually(t, "the calls in flight", func() bool { busy, _ := store.Lanes(); return busy == redis.MaxInFlight })
	eventually(t, "Redis ran the calls in flight", func() bool {
		for i := range redis.MaxInFlight {
			if !exists("inflight" + strconv.Itoa(i)) {
				return false
			}
		}
		return true
	})

	// Its reply comes 5s late, after its deadline: it was sent, and taken,
	// if Redis holds its key.
	hctx, hcancel := context.WithTimeout(ctx, time.Second)
	defer hcancel()
	hasty := make(chan error, 1)
	go func() {
		_, err := store.Take(hctx, one("hasty", 1))
		hasty <- err
	}()
	if err := within(t, "hasty", hasty); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a queued decision whose reply comes after its deadline: %v, want context.DeadlineExceeded", err)
	}
	sent, returned := exists("hasty"), len(inflight)
	if returned != 0 {
		t.Fatalf("%d calls in flight returned before the queued decision's deadline (%v): their replies came early, the test cannot tell", returned, <-inflight)
	}
	if !sent {
		t.Error("a queued decision with a deadline was not sent while the calls in flight had not returned: it waited for one to return, past its deadline")
	}
	release()
	for i := range redis.MaxInFlight {
		if err := within(t, "in flight", inflight); err != nil {
			t.Errorf("in flight %d: %v", i, err)
		}
	}
	eventually(t, "the lane idle", func() bool { busy, q := store.Lanes(); return busy == 0 && q == 0 })
}

// TestTimeoutKeepsConnection: a decision that times out on an idle
// connection (Redis's replies 300ms late, its deadline 50ms) leaves the
// connection open, and the next decision is answered on it. rueidis sends
// a lone command on an idle connection synchronously, under a socket
// deadline that closes the connection when it passes (unless the client
// always pipelines, as Open's does): every decision after a timeout then
// paid a new connection's handshake, one more round trip, inside its own
// deadline, and with Redis more than half the deadline away timed out in
// turn, closing its connection again (cmd/sluice TestNetLatency: a new
// connection every few decisions).
func TestTimeoutKeepsConnection(t *testing.T) {
	srv := redistest.Start(t)
	tp := toxitest.Start(t)
	p := tp.Proxy(t, "redis", srv.Addr)
	admin := newRueidis(t, srv.Addr) // not through the proxy
	store := redis.FromRueidis(rueidisWith(t, rueidis.ClientOption{InitAddress: []string{p.Addr}, ClientName: "far"}), prefix())
	ctx := context.Background()
	// The connections of the store's client, by id.
	conns := func() map[string]bool {
		list, err := admin.Do(ctx, admin.B().ClientList().Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, line := range strings.Split(list, "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && strings.HasPrefix(f[0], "id=") && slices.Contains(f, "name=far") {
				ids[strings.TrimPrefix(f[0], "id=")] = true
			}
		}
		return ids
	}
	if _, err := store.Take(ctx, one("k", 1)); err != nil { // connected, scripts loaded
		t.Fatal(err)
	}
	before := conns()
	latency := p.Add(t, toxitest.Toxic{Type: "latency", Attributes: map[string]any{"latency": 300}})
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := store.Take(tctx, one("k", 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a decision whose reply comes after its deadline: %v, want context.DeadlineExceeded", err)
	}
	p.Remove(t, latency)
	if _, err := store.Take(ctx, one("k", 1)); err != nil {
		t.Fatal(err)
	}
	after := conns()
	if len(before) == 0 {
		t.Fatal("CLIENT LIST names no connection of the store's client")
	}
	for id := range before {
		if !after[id] {
			t.Errorf("connection %s of the store's client closed after a decision on it timed out (open before: %v, after: %v)", id, before, after)
		}
	}
}
