//go:build integration

package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// TestValueLayout: each algorithm stores its state as a decimal integer
// that Redis keeps as a 64-bit integer (OBJECT ENCODING int), in the
// layout the scripts document, under a key of the documented form.
func TestValueLayout(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	snap := &snapshotClient{c: c}
	store := redis.New(snap)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // 1767225600000000µs, minute 29453760
	lim := sluice.New(store, sluice.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	tests := []struct {
		l               sluice.Limit
		n               int // requests, or one request of cost -n
		key, value, enc string
	}{
		{sluice.PerMinute(100).Using(sluice.FixedWindow), 3, "sluice:{client-123}f1m", "3" + "029453760", "int"},
		{sluice.PerMinute(100).Using(sluice.SlidingWindow), 2, "sluice:{client-123}w1m", "2" + "" + "0" + "029453760", "int"},
		{sluice.PerMinute(100).Using(sluice.TokenBucket), 1, "sluice:{client-123}t1m", "6" + "5" + "1767225600600000", "int"},
		{sluice.PerMinute(100).Using(sluice.GCRA).Named("api"), 2, "sluice:{client-123}g1m:api", "6" + "5" + "1767225601200000", "int"},
		{sluice.Per(9000, 1500*time.Millisecond).Using(sluice.FixedWindow), 1, "sluice:{client-123}f1500ms", "1" + "1178150400", "int"},
		// The shortest and longest periods: windows of 13 and 2 digits.
		{sluice.Per(5000, time.Millisecond).Using(sluice.FixedWindow), -1000, "sluice:{client-123}f1ms", "1000" + "1767225600000", "int"},
		{sluice.Per(5, sluice.MaxPeriod).Using(sluice.FixedWindow), 2, "sluice:{client-123}f3650d", "2" + "05", "int"},
		// An interval of 10^10µs: an exponent beyond 9 is a letter.
		{sluice.Per(1, 10_000*time.Second).Using(sluice.GCRA).WithBurst(2), 2, "sluice:{client-123}g10000s", "1" + "a" + "1767245600000000", "embstr"},
	}
	for _, tt := range tests {
		for i := 0; i < max(tt.n, 1); i++ {
			if _, err := lim.AllowN(ctx, "client-123", tt.l, max(-tt.n, 1)); err != nil {
				t.Fatal(err)
			}
		}
		key, v, enc := snap.key, snap.value, snap.enc
		if want := store.Key("client-123", tt.l); key != want {
			t.Errorf("%s: the script wrote %q, Key returns %q", tt.l, key, want)
		}
		if key != tt.key || v != tt.value || enc != tt.enc {
			t.Errorf("%s after %d requests: %q = %q (%s), want %q = %q (%s)", tt.l, tt.n, key, v, enc, tt.key, tt.value, tt.enc)
		}
	}
	// The example of the package doc: current 7 and previous 12 in the
	// minute 29453760.
	seven := sluice.PerMinute(100).Using(sluice.SlidingWindow).Named("doc")
	now = now.Add(-time.Minute)
	if _, err := lim.AllowN(ctx, "doc", seven, 12); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if _, err := lim.AllowN(ctx, "doc", seven, 7); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Do(ctx, c.B().Get().Key(store.Key("doc", seven)).Build()).ToString(); err != nil || v != "7122029453760" {
		t.Errorf("sliding_window, 12 in the previous minute and 7 in this one: %q, %v; want 7122029453760", v, err)
	}
	// The previous window's count, and counts past 9 digits (a string).
	l := sluice.PerMinute(2_000_000_000).Using(sluice.SlidingWindow)
	for _, cost := range []int{12, 1_500_000_000} {
		if _, err := lim.AllowN(ctx, "two", l, cost); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
	}
	v, err := c.Do(ctx, c.B().Get().Key(store.Key("two", l)).Build()).ToString()
	if want := "1500000000" + "12" + "2" + "029453761"; err != nil || v != want {
		t.Errorf("sliding_window over two windows: %q, %v; want %q", v, err, want)
	}
	if _, err := lim.AllowN(ctx, "two", l, 400_000_000); err != nil {
		t.Fatal(err)
	}
	v, err = c.Do(ctx, c.B().Get().Key(store.Key("two", l)).Build()).ToString()
	if want := "400000000" + "1500000000" + "a" + "029453762"; err != nil || v != want {
		t.Errorf("sliding_window with a count of 10 digits: %q, %v; want %q", v, err, want)
	}
}

// TestRefundLayout: a fixed_window refund leaves the value a take of the
// settled cost would have, as an integer, with the window's TTL kept:
// counts in exact arithmetic go through one INCRBY, longer values (a 1ms
// window's 13 digits beyond a count of 900) through the string path; a
// refund of the whole count, or after its window ended, removes the key,
// and one to a window replaced since, or to a key gone, leaves it as it
// is.
func TestRefundLayout(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	snap := &snapshotClient{c: c}
	store := redis.New(snap)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // minute 29453760
	// A 1ms window's key lives until its window ends by the server's
	// clock, and at least its 1ms: a window of 2100 (millisecond
	// 4102444800000) lives until then, so that it is still there when the
	// settle comes, however slow the machine. A window of the past would
	// expire a millisecond after the reservation wrote it.
	far := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	lim := sluice.New(store, sluice.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	minute := sluice.PerMinute(100).Using(sluice.FixedWindow)
	milli := sluice.Per(5000, time.Millisecond).Using(sluice.FixedWindow)
	tests := []struct {
		name            string
		l               sluice.Limit
		before          int // taken before the reservation
		reserve, actual int
		later           time.Duration // from the reservation to the settle
		between         int           // taken just before the settle
		value, enc      string        // after the settle; "" for no key
	}{
		{"in place", minute, 3, 5, 2, 0, 0, "5" + "029453760", "int"},
		{"a long value", milli, 0, 3000, 1000, 0, 0, "1000" + "4102444800000", "int"},
		{"the whole count", minute, 0, 5, 0, 0, 0, "", ""},
		{"after its window", minute, 0, 5, 1, time.Minute, 0, "", ""},
		{"a window replaced", minute, 0, 5, 1, time.Minute, 2, "2" + "029453761", "int"},
		{"a key gone", minute, 0, 5, 1, 2 * time.Minute, 0, "", ""},
	}
	for i, tt := range tests {
		key := fmt.Sprintf("refund-%d", i)
		now = start
		if tt.l == milli {
			now = far
		}
		if tt.before > 0 {
			if _, err := lim.AllowN(ctx, key, tt.l, tt.before); err != nil {
				t.Fatal(err)
			}
		}
		r, err := lim.Reserve(ctx, key, tt.l, tt.reserve)
		if err != nil || !r.Allowed {
			t.Fatalf("%s: reserve: %+v, %v", tt.name, r, err)
		}
		if tt.later >= 2*time.Minute { // the window's state expired
			if err := c.Do(ctx, c.B().Del().Key(store.Key(key, tt.l)).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(tt.later)
		if tt.between > 0 {
			if _, err := lim.AllowN(ctx, key, tt.l, tt.between); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Settle(ctx, tt.actual); err != nil {
			t.Fatalf("%s: settle: %v", tt.name, err)
		}
		if snap.value != tt.value || snap.enc != tt.enc {
			t.Errorf("%s: after the settle %q (%s), want %q (%s)", tt.name, snap.value, snap.enc, tt.value, tt.enc)
		}
		if tt.l == minute && tt.value != "" && tt.later == 0 { // a 1ms window expires at once
			ttl, err := c.Do(ctx, c.B().Pttl().Key(store.Key(key, tt.l)).Build()).AsInt64()
			if err != nil || ttl <= 0 {
				t.Errorf("%s: PTTL %d, %v after the settle; want the window's TTL kept", tt.name, ttl, err)
			}
		}
	}
}

// snapshotClient is a Client that runs each script in a MULTI with a GET
// and an OBJECT ENCODING of its first key, and keeps what they read.
// Redis reads its clock once for a whole transaction, so a state that
// lives a millisecond (a period of 1ms) is read before it expires, however
// slow the machine.
type snapshotClient struct {
	c               rueidis.Client
	key, value, enc string
}

// EvalSha makes the store send every script with Eval.
func (s *snapshotClient) EvalSha(context.Context, string, []string, []string) ([]int64, error) {
	return nil, fmt.Errorf("%w: snapshotClient sends the script", redis.ErrNoScript)
}

func (s *snapshotClient) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	b := s.c.B()
	rs := s.c.DoMulti(ctx,
		b.Multi().Build(),
		b.Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(),
		b.Get().Key(keys[0]).Build(),
		b.ObjectEncoding().Key(keys[0]).Build(),
		b.Exec().Build())
	replies, err := rs[len(rs)-1].ToArray()
	if err != nil {
		return nil, err
	}
	s.key = keys[0]
	s.value, _ = replies[1].ToString() // "" if the script stored nothing
	s.enc, _ = replies[2].ToString()
	return replies[0].AsIntSlice()
}

// TestMemoryUsage: what one client key's state costs Redis under each
// algorithm (MEMORY USAGE, after one admitted request of 100 per minute,
// at the server's clock) stays within the bound the package documents
// (see "Keys" in redis.go): with the default prefix and the client key
// "client-123", 72 bytes for every algorithm but sliding_log (the key is
// 22 bytes, in Redis's allocation class of 15 to 30; 56 bytes needs a key
// of at most 14), and 56 with the prefix "s" and the client key "u1"; a
// sliding_log of n entries of cost 1, at most 80 + 25n bytes up to 128
// entries (Redis's zset-max-listpack-entries) and 200 + 150n beyond.
func TestMemoryUsage(t *testing.T) {
	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	ctx := context.Background()
	usage := func(store *redis.Store, key string, l sluice.Limit, n int) int64 {
		t.Helper()
		for range n {
			if _, err := sluice.New(store).Allow(ctx, key, l); err != nil {
				t.Fatal(err)
			}
		}
		b, err := c.Do(ctx, c.B().MemoryUsage().Key(store.Key(key, l)).Samples(0).Build()).AsInt64() // every member counted
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	long := redis.FromRueidis(c)
	short := redis.FromRueidis(c, redis.WithPrefix("s"))
	for _, a := range sluice.Algorithms {
		l := sluice.PerMinute(100).Using(a)
		if a == sluice.SlidingLog {
			l := sluice.PerMinute(1000).Using(a)
			for _, n := range []int{1, 10, 100, 128, 129, 1000} {
				bound := int64(80 + 25*n) // a listpack: 20 B per member
				if n > 128 {
					bound = int64(200 + 150*n) // beyond zset-max-listpack-entries: a skiplist, of random levels
				}
				if b := usage(long, fmt.Sprint("client-", n), l, n); b > bound {
					t.Errorf("sliding_log of %d entries: %d B, want at most %d", n, b, bound)
				} else {
					t.Logf("sliding_log of %d entries: %d B (bound %d)", n, b, bound)
				}
			}
			continue
		}
		if b := usage(long, "client-123", l, 1); b > 72 {
			t.Errorf("%s: %q: %d B, want at most 72", a, long.Key("client-123", l), b)
		} else {
			t.Logf("%s: %q: %d B", a, long.Key("client-123", l), b)
		}
		if b := usage(short, "u1", l, 1); b > 56 {
			t.Errorf("%s: %q: %d B, want at most 56", a, short.Key("u1", l), b)
		}
	}
}

// TestKeysDistinct: the short keys stay collision-free and binary safe.
// Over prefixes and client keys made of the characters the encoding
// treats specially (braces, '%', the letters and digits of a limit's
// part, bytes that are not text) and limits of every algorithm, period
// unit and name, two inputs share a key exactly when they are the same
// prefix, client key and limit identity; and a decision on each key of
// binary bytes runs and leaves its state there.
func TestKeysDistinct(t *testing.T) {
	prefixes := []string{"sluice", "s", "a:b", "a{b", "a}", "a%7Bb", "f1m"}
	clientKeys := []string{"", "%0", "%", "%25", "a", "a}", "}a", "{a}", "k}f1m", "kf1m", "k:f1m", "\x00", "\x00\xff{}", "ключ", strings.Repeat("x", 200), strings.Repeat("x", 201)}
	var limits []sluice.Limit
	for _, a := range sluice.Algorithms {
		for _, p := range []time.Duration{time.Millisecond, 1500 * time.Millisecond, time.Second, time.Minute, time.Hour, 24 * time.Hour, 1001 * time.Microsecond} {
			for _, name := range []string{"", "m", "1m", "api"} {
				limits = append(limits, sluice.Limit{Algorithm: a, Limit: 1, Period: p, Name: name})
			}
		}
	}
	type input struct {
		prefix, key string
		id          sluice.Limit
	}
	seen := make(map[string]input)
	for _, p := range prefixes {
		store := redis.New(nil, redis.WithPrefix(p))
		for _, k := range clientKeys {
			for _, l := range limits {
				in := input{p, k, l.Identity()}
				key := store.Key(k, l)
				if prev, ok := seen[key]; ok && prev != in {
					t.Fatalf("%+v and %+v share the key %q", prev, in, key)
				}
				seen[key] = in
			}
		}
	}
	if want := len(prefixes) * len(clientKeys) * len(limits); len(seen) != want {
		t.Fatalf("%d distinct keys, want %d", len(seen), want)
	}

	srv := redistest.Start(t)
	c := newRueidis(t, srv.Addr)
	store := redis.FromRueidis(c)
	ctx := context.Background()
	for i := 0; i < len(limits); i += 4 { // every algorithm and period, without names
		// A state of a 1ms period lives about 2ms, which a loaded machine
		// can take between the decision and the EXISTS: the key is
		// looked for after each of several decisions, and must be seen
		// once (a wrong name is never seen).
		l, key := limits[i], "\x00\xff{}\r\n"
		var n int64
		for try := 0; try < 50 && n != 1; try++ {
			if _, err := sluice.New(store).Allow(ctx, key, l); err != nil {
				t.Fatal(err)
			}
			var err error
			if n, err = c.Do(ctx, c.B().Exists().Key(store.Key(key, l)).Build()).AsInt64(); err != nil {
				t.Fatal(err)
			}
		}
		if n != 1 {
			t.Errorf("%s on a binary client key: EXISTS %q = 0 after each of 50 decisions; want 1", l, store.Key(key, l))
		}
	}
}
