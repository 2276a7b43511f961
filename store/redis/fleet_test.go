//go:build integration

package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// TestHeartbeat: replicas that beat are counted, each once however often
// it beats; one that stops is dropped when its heartbeat runs out; stores
// of another prefix keep a fleet of their own.
func TestHeartbeat(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	s := redis.FromRueidis(c)
	other := redis.FromRueidis(c, redis.WithPrefix("other"))
	ctx := context.Background()
	beat := func(s *redis.Store, member string, ttl time.Duration) int {
		t.Helper()
		n, err := s.Heartbeat(ctx, member, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := beat(s, "a", time.Minute); n != 1 {
		t.Errorf("first heartbeat: %d replicas, want 1", n)
	}
	if n := beat(s, "a", time.Minute); n != 1 {
		t.Errorf("a beating again: %d replicas, want 1", n)
	}
	if n := beat(s, "b", 300*time.Millisecond); n != 2 {
		t.Errorf("b joins: %d replicas, want 2", n)
	}
	if n := beat(other, "c", time.Minute); n != 1 {
		t.Errorf("another prefix: %d replicas, want 1 (its own fleet)", n)
	}
	// b stops beating: gone once its heartbeat runs out, in Redis's time.
	deadline := time.Now().Add(10 * time.Second)
	for beat(s, "a", time.Minute) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("b still counted 10s after its 300ms heartbeat")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := s.Heartbeat(ctx, "a", 0); err == nil {
		t.Error("Heartbeat with ttl 0: no error")
	}
}
