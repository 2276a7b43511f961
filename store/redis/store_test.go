//go:build integration

package redis_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/redis/goredis"
)

// infoStats parses the lines "<prefix><name>:<field>=<value>,..." of an
// INFO reply into their fields by name: INFO commandstats has the prefix
// "cmdstat_" (cmdstat_evalsha:calls=10,usec=...), INFO errorstats
// "errorstat_" (errorstat_MOVED:count=3).
func infoStats(info, prefix string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, prefix) {
			continue
		}
		m := map[string]string{}
		for _, f := range strings.Split(fields, ",") {
			if k, v, ok := strings.Cut(f, "="); ok {
				m[k] = v
			}
		}
		out[strings.TrimPrefix(name, prefix)] = m
	}
	return out
}

// commandStats returns the server's INFO commandstats, by command (lower
// case).
func commandStats(t testing.TB, c rueidis.Client) map[string]map[string]string {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	return infoStats(info, "cmdstat_")
}

// commandCalls returns how many times the server ran cmd (INFO
// commandstats).
func commandCalls(t *testing.T, c rueidis.Client, cmd string) int {
	t.Helper()
	n, _ := strconv.Atoi(commandStats(t, c)[cmd]["calls"])
	return n
}

// TestScriptLoadedOnceAndReloaded: the script is sent once and then run by
// SHA; after SCRIPT FLUSH (as after a restart) the store sends it again,
// transparently, once.
func TestScriptLoadedOnceAndReloaded(t *testing.T) {
	srv := redistest.Start(t)
	admin := newRueidis(t, srv.Addr)
	stores := map[string]sluice.Store{
		"rueidis":  redis.FromRueidis(newRueidis(t, srv.Addr)),
		"go-redis": goredis.New(newGoRedis(t, srv.Addr)),
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if err := admin.Do(ctx, admin.B().ScriptFlush().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			lim := sluice.New(store)
			for i := range 10 {
				r, err := lim.Allow(ctx, "k-"+name, sluice.PerMinute(100))
				if err != nil || !r.Allowed {
					t.Fatalf("request %d: %+v, %v", i, r, err)
				}
			}
			if evals, shas := commandCalls(t, admin, "eval"), commandCalls(t, admin, "evalsha"); evals != 1 || shas != 10 {
				t.Errorf("after a flush, 10 decisions sent EVAL %d times and EVALSHA %d times; want 1 and 10", evals, shas)
			}
		})
	}
}

// TestKeys: every key a workload leaves has a TTL and the schema
// prefix:{client key}limit, whatever the client key holds, and long keys
// are hashed.
func TestKeys(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(c)
	lim := sluice.New(store)
	ctx := context.Background()
	var limits []sluice.Limit
	for _, a := range sluice.Algorithms {
		limits = append(limits, sluice.PerMinute(3).Using(a))
	}
	clientKeys := []string{"plain", "br{ace}s", "}{", "%7B", "", strings.Repeat("x", 5000)}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		k := clientKeys[rng.IntN(len(clientKeys))]
		if _, err := lim.AllowAll(ctx, k, 1+rng.IntN(2), limits...); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := c.Do(ctx, c.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if want := len(clientKeys) * len(limits); len(keys) != want {
		t.Errorf("%d keys in Redis, want %d (one per client key and limit): %q", len(keys), want, keys)
	}
	schema := regexp.MustCompile(`^sluice:\{[^{}]+\}[fwltg][1-9][0-9]*(d|h|m|s|ms|us)$`)
	for _, k := range keys {
		if !schema.MatchString(k) {
			t.Errorf("key %q does not follow sluice:{client}limit with one hash tag", k)
		}
		if len(k) > 200 {
			t.Errorf("key of %d bytes: long client keys must be hashed", len(k))
		}
		ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil || ttl <= 0 || ttl > int64(2*time.Minute/time.Millisecond) {
			t.Errorf("key %q has PTTL %d, %v; want a TTL no longer than its state needs", k, ttl, err)
		}
	}
	// Every key of one decision shares the hash tag, hence the Cluster slot.
	tag := regexp.MustCompile(`\{[^}]*\}`)
	for _, k := range clientKeys {
		first := tag.FindString(store.Key(k, limits[0]))
		for _, l := range limits[1:] {
			if got := tag.FindString(store.Key(k, l)); got != first {
				t.Errorf("client key %q: hash tags %s and %s differ", k, first, got)
			}
		}
	}
}

// TestOutage: with the server gone, every error policy decides as
// documented and nothing panics.
func TestOutage(t *testing.T) {
	srv := redistest.Start(t)
	store := redis.FromRueidis(newRueidis(t, srv.Addr))
	l := sluice.PerMinute(2)
	if _, err := sluice.New(store).Allow(context.Background(), "k", l); err != nil {
		t.Fatal(err)
	}
	if err := store.Ping(context.Background()); err != nil {
		t.Fatalf("Ping with the server up: %v", err)
	}
	srv.Stop()
	if err := store.Ping(context.Background()); err == nil {
		t.Error("Ping with the server down returned no error")
	}
	tests := []struct {
		policy  sluice.ErrorPolicy
		allowed []bool // successive requests
	}{
		{sluice.ReturnErrors, nil},
		{sluice.AllowOnError, []bool{true, true, true}},
		{sluice.DenyOnError, []bool{false, false}},
		{sluice.LocalOnError(memory.New()), []bool{true, true, false}},
		{sluice.LocalOnError(nil), nil}, // no fallback: the error, not a panic
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var seen []error
			lim := sluice.New(store, sluice.WithErrorPolicy(tt.policy), sluice.WithHooks(sluice.Hooks{StoreError: func(_ context.Context, err error) {
				seen = append(seen, err)
			}}))
			if tt.allowed == nil {
				if _, err := lim.Allow(ctx, "k", l); err == nil {
					t.Fatal("Allow with the server down returned no error under ReturnErrors")
				}
				return
			}
			for i, want := range tt.allowed {
				r, err := lim.Allow(ctx, "k", l)
				if err != nil || r.Allowed != want || r.Degraded == sluice.NotDegraded {
					t.Fatalf("request %d: %+v, %v; want Allowed=%v Degraded", i, r, err, want)
				}
				if !want && r.RetryAfter <= 0 {
					t.Errorf("request %d denied with RetryAfter %v", i, r.RetryAfter)
				}
			}
			if len(seen) != len(tt.allowed) {
				t.Errorf("error handler saw %d errors, want %d", len(seen), len(tt.allowed))
			}
			if tt.policy.String() == "local" {
				// Reset fails with the store down, but clears what the key
				// spent locally.
				if err := lim.Reset(ctx, "k", l); err == nil {
					t.Error("Reset with the server down returned no error")
				}
				if r, err := lim.Allow(ctx, "k", l); err != nil || !r.Allowed {
					t.Errorf("after Reset: %+v, %v; want the local state cleared", r, err)
				}
			}
		})
	}
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := sluice.New(store, sluice.WithErrorPolicy(sluice.AllowOnError)).Allow(ctx, "k", l)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("canceled request: err = %v, want context.Canceled whatever the policy", err)
		}
	})
}

// TestHungServer: a server that stops answering is an outage too: with a
// store timeout the policy decides instead of holding the request.
func TestHungServer(t *testing.T) {
	srv := redistest.Start(t)
	admin := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(newRueidis(t, srv.Addr))
	lim := sluice.New(store, sluice.WithStoreTimeout(100*time.Millisecond), sluice.WithErrorPolicy(sluice.DenyOnError))
	ctx := context.Background()
	if r, err := lim.Allow(ctx, "k", sluice.PerMinute(5)); err != nil || r.Degraded != sluice.NotDegraded || !r.Allowed {
		t.Fatalf("before the pause: %+v, %v", r, err)
	}
	// The server holds every client's commands for far longer than the
	// test needs, however slow the machine, and is killed when the test
	// ends, before the clients close (which would wait for the pause).
	t.Cleanup(srv.Stop)
	if err := admin.Do(ctx, admin.B().ClientPause().Timeout(60000).All().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	r, err := lim.Allow(ctx, "k", sluice.PerMinute(5))
	if err != nil || r.Allowed || r.Degraded == sluice.NotDegraded {
		t.Fatalf("during the pause: %+v, %v; want denied by the policy, degraded", r, err)
	}
	// A caller whose own deadline (shorter than the default store timeout)
	// expires while the store hangs gets the policy's answer too.
	seen := 0
	open := sluice.New(store, sluice.WithErrorPolicy(sluice.AllowOnError), sluice.WithHooks(sluice.Hooks{StoreError: func(context.Context, error) { seen++ }}))
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	r, err = open.Allow(short, "k", sluice.PerMinute(5))
	if err != nil || !r.Allowed || r.Degraded == sluice.NotDegraded || seen != 1 {
		t.Fatalf("caller deadline during the pause: %+v, %v, %d errors seen; want admitted by the policy, degraded, 1 error seen", r, err, seen)
	}
}

// TestForeignState: a key holding what sluice did not write is either read
// as no state (an unparsable string) or reported as an error (another type),
// never a panic.
func TestForeignState(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(c)
	lim := sluice.New(store)
	ctx := context.Background()
	for _, a := range sluice.Algorithms {
		l := sluice.PerMinute(5).Using(a)
		if a != sluice.SlidingLog {
			if err := c.Do(ctx, c.B().Set().Key(store.Key("garbage", l)).Value("not:a:state:x").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			r, err := lim.Allow(ctx, "garbage", l)
			if err != nil || !r.Allowed || r.Remaining != 4 {
				t.Errorf("%s over an unparsable string: %+v, %v; want a fresh state", l, r, err)
			}
		}
		if err := c.Do(ctx, c.B().Hset().Key(store.Key("wrongtype", l)).FieldValue().FieldValue("f", "v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Allow(ctx, "wrongtype", l); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("%s over a hash: err = %v, want the WRONGTYPE error", l, err)
		}
	}
}

// TestPrefix: the prefix starts every key whole, with '%', '{' and '}'
// percent-encoded so that the client key stays the hash tag (and distinct
// prefixes give distinct keys); an empty prefix is refused.
func TestPrefix(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	l := sluice.PerMinute(3)
	long := strings.Repeat("p", 200)
	tests := []struct{ prefix, encoded string }{
		{"app", "app"},
		{"a{b}", "a%7Bb%7D"},
		{"a%7Bb%7D", "a%257Bb%257D"},
		{"}{", "%7D%7B"},
		{long, long}, // a prefix is not a hostile key: never hashed
	}
	ctx := context.Background()
	for _, tt := range tests {
		store := redis.FromRueidis(c, redis.WithPrefix(tt.prefix))
		for _, key := range []string{"k", "", "br{ace}"} {
			got := store.Key(key, l)
			want := redis.FromRueidis(c).Key(key, l)
			want = tt.encoded + strings.TrimPrefix(want, "sluice")
			if got != want {
				t.Errorf("WithPrefix(%q): key of %q = %q, want %q", tt.prefix, key, got, want)
			}
			if _, err := sluice.New(store).Allow(ctx, key, l); err != nil {
				t.Fatal(err)
			}
			n, err := c.Do(ctx, c.B().Exists().Key(want).Build()).AsInt64()
			if err != nil || n != 1 {
				t.Errorf("WithPrefix(%q): a decision on %q left no key %q: EXISTS = %d, %v", tt.prefix, key, want, n, err)
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error(`WithPrefix("") did not panic; keys would start with ':'`)
		}
	}()
	redis.WithPrefix("")
}

// TestScriptChoice: a decision whose limits share one algorithm runs that
// algorithm's script, whether the algorithm is named or left to the
// default (token_bucket); only a decision mixing algorithms runs the
// script of all five. The server is asked which script it was sent.
func TestScriptChoice(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	lim := sluice.New(redis.FromRueidis(c))
	shas, all := redis.ScriptSHAs()
	byDefault := sluice.Limit{Limit: 5, Period: time.Minute} // Algorithm "": token_bucket
	tests := []struct {
		name   string
		limits []sluice.Limit
		want   string // the name of the script that must run
	}{
		{"default", []sluice.Limit{byDefault}, string(sluice.TokenBucket)},
		{"default and token_bucket", []sluice.Limit{byDefault, sluice.PerHour(100)}, string(sluice.TokenBucket)},
		{"token_bucket and default", []sluice.Limit{sluice.PerHour(100), byDefault}, string(sluice.TokenBucket)},
		{"two gcra", []sluice.Limit{sluice.PerHour(100).Using(sluice.GCRA), sluice.PerMinute(5).Using(sluice.GCRA)}, string(sluice.GCRA)},
		{"default and gcra", []sluice.Limit{byDefault, sluice.PerHour(100).Using(sluice.GCRA)}, "all"},
		{"fixed_window and sliding_log", []sluice.Limit{sluice.PerMinute(5).Using(sluice.FixedWindow), sluice.PerHour(100).Using(sluice.SlidingLog)}, "all"},
	}
	names := []string{"all"}
	args := []string{all}
	for _, a := range sluice.Algorithms {
		names = append(names, string(a))
		args = append(args, shas[a])
	}
	ctx := context.Background()
	for _, tt := range tests {
		if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if r, err := lim.AllowAll(ctx, "choice", 1, tt.limits...); err != nil || !r.Allowed {
			t.Fatalf("%s: %+v, %v", tt.name, r, err)
		}
		exists, err := c.Do(ctx, c.B().ScriptExists().Sha1(args...).Build()).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		var ran []string
		for i, e := range exists {
			if e == 1 {
				ran = append(ran, names[i])
			}
		}
		if len(ran) != 1 || ran[0] != tt.want {
			t.Errorf("%s: the server was sent the scripts %q, want only %q", tt.name, ran, tt.want)
		}
	}
}
