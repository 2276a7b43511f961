//go:build integration

package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// TestSlotKeys: a concurrency limit's state is the documented sorted set
// (see "Values"): one member per slot held, named by the slot and scored
// by the end of its lease; the key lives until the last lease ends and
// goes with the last release.
func TestSlotKeys(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(c)
	lim := sluice.New(store)
	ctx := context.Background()
	l := sluice.Concurrent(2).Named("exports")
	l.Period = 10 * time.Second
	key := store.Key("acct", l)
	if want := "sluice:{acct}c:exports"; key != want {
		t.Fatalf("Key = %q, want %q", key, want)
	}
	a, err := lim.Acquire(ctx, "acct", l)
	if err != nil || !a.Allowed {
		t.Fatalf("Acquire = %+v, %v", a, err)
	}
	b, err := lim.Acquire(ctx, "acct", l)
	if err != nil || !b.Allowed {
		t.Fatalf("Acquire = %+v, %v", b, err)
	}
	members, err := c.Do(ctx, c.B().Zrange().Key(key).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		t.Fatal(err)
	}
	server, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 2 {
		t.Fatalf("ZRANGE %s = %v, want the two slots", key, members)
	}
	for _, m := range members {
		if m.Member != a.Slot() && m.Member != b.Slot() {
			t.Errorf("member %q is neither slot (%q, %q)", m.Member, a.Slot(), b.Slot())
		}
		// The lease ends 10s after the take, by the server's clock.
		if ends := time.UnixMicro(int64(m.Score)); ends.Before(serverTime(t, server)) || ends.After(serverTime(t, server).Add(l.Period)) {
			t.Errorf("slot %q's lease ends at %v; server time %v, lease %v", m.Member, ends, serverTime(t, server), l.Period)
		}
	}
	if ttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64(); err != nil || ttl <= 0 || ttl > l.Period.Milliseconds() {
		t.Errorf("PTTL %s = %d, %v; want at most the lease", key, ttl, err)
	}
	if _, err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Do(ctx, c.B().Zcard().Key(key).Build()).AsInt64(); err != nil || n != 1 {
		t.Errorf("ZCARD after one release = %d, %v; want 1", n, err)
	}
	if _, err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(key).Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("EXISTS after the last release = %d, %v; want the key gone", n, err)
	}
}

// serverTime reads a TIME reply.
func serverTime(t *testing.T, reply []string) time.Time {
	t.Helper()
	var s, us int64
	if _, err := fmt.Sscan(reply[0], &s); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(reply[1], &us); err != nil {
		t.Fatal(err)
	}
	return time.Unix(s, us*1000)
}
