//go:build integration

package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// aclCommands are the commands a sluice user needs, as the README lists
// them: those of the scripts (lua/*.lua and the heartbeat's), the
// scripts' own EVALSHA and EVAL, and PING, which rueidis sends on idle
// connections.
var aclCommands = []string{
	"evalsha", "eval", "ping",
	"get", "set", "incrby", "del", "pexpire", "time",
	"zadd", "zcard", "zcount", "zrange", "zrangebyscore", "zremrangebyscore", "zrem", "zscore",
}

// aclRules are the ACL rules permitting aclCommands.
func aclRules() []string {
	r := make([]string, len(aclCommands))
	for i, c := range aclCommands {
		r[i] = "+" + c
	}
	return r
}

// setUser creates (or replaces) the ACL user name with password pw and
// the rules, through the admin client c.
func setUser(t *testing.T, c rueidis.Client, name, pw string, rules ...string) {
	t.Helper()
	args := append([]string{"ACL", "SETUSER", name, "reset", "on", ">" + pw}, rules...)
	if err := c.Do(context.Background(), c.B().Arbitrary(args...).Build()).Error(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
}

// noPerm reports whether err is Redis refusing a command to the user:
// NOPERM, or inside a script, from Redis 7.0, "The user executing the
// script can't run this command".
func noPerm(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't run this command"))
}

// openOrFail opens the store at url, closed when t ends.
func openOrFail(t *testing.T, url string, opts ...redis.Option) *redis.Store {
	t.Helper()
	s, err := redis.Open(url, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// readyCtx is a context for one Ready or Ping, generous on a loaded
// machine.
func readyCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestReady: Ready runs a decision on the reserved key, which expires
// within a second, through the script's SHA (reloading it after a SCRIPT
// FLUSH), and fails on a full server (OOM) and once Redis is down.
func TestReady(t *testing.T) {
	srv := redistest.Start(t)
	admin := newRueidis(t, srv.Addr)
	s := openOrFail(t, "redis://"+srv.Addr, redis.WithPrefix("app"))
	ctx := context.Background()
	if err := s.Ready(readyCtx(t)); err != nil {
		t.Fatalf("Ready on a healthy server: %v", err)
	}
	keys, err := admin.Do(ctx, admin.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	const reserved = "app:{%ready}f1s"
	if len(keys) != 1 || keys[0] != reserved {
		t.Fatalf("after Ready, the keys are %q; want the reserved key %s alone", keys, reserved)
	}
	if ttl, err := admin.Do(ctx, admin.B().Pttl().Key(reserved).Build()).AsInt64(); err != nil || ttl <= 0 || ttl > 1000 {
		t.Errorf("the reserved key has PTTL %d ms, %v; want at most a second", ttl, err)
	}
	// No client key reaches the reserved key: those that look closest.
	for _, k := range []string{"%ready", "{%ready}", "%25ready", "ready", ""} {
		if got := s.Key(k, sluice.Limit{Algorithm: sluice.FixedWindow, Limit: 1, Period: time.Second}); got == reserved {
			t.Errorf("client key %q is stored at the reserved key %s", k, got)
		}
	}

	if err := admin.Do(ctx, admin.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := s.Ready(readyCtx(t)); err != nil {
			t.Fatalf("Ready after SCRIPT FLUSH: %v", err)
		}
	}
	if evals, shas := commandCalls(t, admin, "eval"), commandCalls(t, admin, "evalsha"); evals != 1 || shas != 3 {
		t.Errorf("3 Ready after a flush sent EVAL %d times and EVALSHA %d times; want 1 and 3 (by SHA, the source once)", evals, shas)
	}

	// A full server (maxmemory reached, noeviction) refuses the write.
	setConfig := func(v string) {
		if err := admin.Do(ctx, admin.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", v).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	setConfig("1")
	if err := s.Ready(readyCtx(t)); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("Ready on a full server = %v, want OOM", err)
	}
	setConfig("0")
	if err := s.Ready(readyCtx(t)); err != nil {
		t.Errorf("Ready once the server has room again: %v", err)
	}

	srv.Stop()
	err = s.Ready(readyCtx(t))
	if err == nil || !strings.HasPrefix(err.Error(), "redis store: not ready: ") {
		t.Errorf("Ready with Redis down = %v, want a not-ready error", err)
	}
}

// TestReadyNoPerm: an ACL user that may run scripts but not write, every
// decision fails and so does Ready, saying NOPERM, while Ping passes.
func TestReadyNoPerm(t *testing.T) {
	srv := redistest.Start(t)
	admin := newRueidis(t, srv.Addr)
	setUser(t, admin, "nowrite", "pw", "~*", "+@all", "-@write")
	s := openOrFail(t, "redis://nowrite:pw@"+srv.Addr, prefix())
	if err := s.Ping(readyCtx(t)); err != nil {
		t.Fatalf("Ping as a user who may run scripts: %v", err)
	}
	_, err := sluice.New(s).Allow(readyCtx(t), "k", sluice.PerMinute(10))
	if !noPerm(err) {
		t.Errorf("a decision as a user who may not write: %v, want NOPERM", err)
	}
	err = s.Ready(readyCtx(t))
	if err == nil || !strings.Contains(err.Error(), "not ready") || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Ready as a user who may not write = %v, want not ready, NOPERM", err)
	}
}

// TestReadyReadOnlyReplica: a store connected to a read-only replica
// fails every decision and Ready, saying READONLY, while Ping passes.
func TestReadyReadOnlyReplica(t *testing.T) {
	primary, replica := redistest.Start(t), redistest.Start(t)
	rc := newRueidis(t, replica.Addr)
	host, p, _ := strings.Cut(primary.Addr, ":")
	port, _ := strconv.ParseInt(p, 10, 64)
	ctx := context.Background()
	if err := rc.Do(ctx, rc.B().Replicaof().Host(host).Port(port).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Do(ctx, rc.B().ConfigSet().ParameterValue().ParameterValue("replica-read-only", "yes").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s := openOrFail(t, "redis://"+replica.Addr, prefix())
	if err := s.Ping(readyCtx(t)); err != nil {
		t.Fatalf("Ping on a replica: %v", err)
	}
	_, err := sluice.New(s).Allow(readyCtx(t), "k", sluice.PerMinute(10))
	if err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("a decision on a read-only replica: %v, want READONLY", err)
	}
	err = s.Ready(readyCtx(t))
	if err == nil || !strings.Contains(err.Error(), "not ready") || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("Ready on a read-only replica = %v, want not ready, READONLY", err)
	}
}

// TestMinimalACL: a user permitted only the commands the README lists,
// on the store's keys only, runs decisions under every algorithm (one
// script each, and the script of all five), a refund, a Reset, Ready and
// Ping; and
// without any one of the script commands, some decision fails with
// NOPERM, so the list holds nothing superfluous.
func TestMinimalACL(t *testing.T) {
	srv := redistest.Start(t)
	admin := newRueidis(t, srv.Addr)
	var limits []sluice.Limit
	for _, a := range sluice.Algorithms {
		limits = append(limits, sluice.PerMinute(5).Using(a))
	}
	// run runs what the store does on keys of its own for tag.
	run := func(s *redis.Store, tag string) error {
		lim := sluice.New(s)
		ctx := readyCtx(t)
		for _, l := range limits {
			for range 7 { // past the limit: denials too
				if _, err := lim.Allow(ctx, tag, l); err != nil {
					return err
				}
			}
		}
		// A refund, which a decision split over Cluster slots runs.
		req := sluice.Request{Parts: []sluice.Part{{Key: tag + "-refunded", Limits: limits, Cost: 2}}, Now: time.Now()}
		rs, err := s.Take(ctx, req)
		if err != nil {
			return err
		}
		at := make([]time.Time, len(rs))
		for i := range at {
			at[i] = req.Now
		}
		if _, err := s.Refund(ctx, sluice.Request{Parts: req.Parts}, sluice.Taken{Results: rs, At: at}); err != nil {
			return err
		}
		if _, err := lim.AllowAll(ctx, tag+"-all", 1, limits...); err != nil {
			return err
		}
		// A slot, acquired, renewed and released.
		slot, err := lim.Acquire(ctx, tag+"-slot", sluice.Concurrent(2))
		if err != nil {
			return err
		}
		if _, err := slot.Renew(ctx); err != nil {
			return err
		}
		if _, err := slot.Release(ctx); err != nil {
			return err
		}
		// A peek, under a raised limit too (a bucket converted unstored).
		for _, ls := range [][]sluice.Limit{limits, {sluice.PerMinute(9)}} {
			if _, err := lim.Peek(ctx, sluice.Part{Key: tag + "-all", Limits: ls, Cost: 1}); err != nil {
				return err
			}
		}
		if err := s.Reset(ctx, tag, limits...); err != nil {
			return err
		}
		if err := s.Ready(ctx); err != nil {
			return err
		}
		if _, err := s.Heartbeat(ctx, tag, time.Second); err != nil {
			return err
		}
		return s.Ping(ctx)
	}
	rules := func(cmds []string) []string {
		r := []string{"resetkeys", "~app:*", "resetchannels", "-@all"}
		for _, c := range cmds {
			r = append(r, "+"+c)
		}
		return r
	}
	setUser(t, admin, "sluice", "pw", rules(aclCommands)...)

	s := openOrFail(t, "redis://sluice:pw@"+srv.Addr, redis.WithPrefix("app"))
	if err := run(s, "all"); err != nil {
		t.Fatalf("as a user permitted %v: %v", aclCommands, err)
	}
	// Another prefix is outside the user's keys.
	other := openOrFail(t, "redis://sluice:pw@"+srv.Addr, redis.WithPrefix("other"))
	if err := other.Ready(readyCtx(t)); !noPerm(err) {
		t.Errorf("Ready on keys outside the user's = %v, want NOPERM", err)
	}
	for i, c := range aclCommands {
		if c == "ping" {
			continue // rueidis's, on idle connections only
		}
		less := append(append([]string(nil), aclCommands[:i]...), aclCommands[i+1:]...)
		setUser(t, admin, "sluice", "pw", rules(less)...)
		// The scripts must not be cached, or EVALSHA would need no EVAL.
		if err := admin.Do(context.Background(), admin.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		s := openOrFail(t, "redis://sluice:pw@"+srv.Addr, redis.WithPrefix("app"))
		if err := run(s, c); !noPerm(err) {
			t.Errorf("without %s: %v, want a NOPERM failure", c, err)
		}
		s.Close()
	}
}
