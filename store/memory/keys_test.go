package memory

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/longkey"
)

// TestLongKeys: the store keeps a key longer than longkey.MaxLen as its
// fixed-length hash, so 1 MiB keys do not cost 1 MiB each; such keys still
// keep their own state, apart from each other and from a short key equal to
// their hash.
func TestLongKeys(t *testing.T) {
	now := time.Unix(1_767_225_600, 0)
	clock := func() time.Time { return now }
	s := New(WithClock(clock))
	lim := sluice.New(s, sluice.WithClock(clock))
	ctx := context.Background()
	l := sluice.PerMinute(1)
	const n = 16
	long := strings.Repeat("k", 1<<20)
	for i := range n {
		if r, err := lim.Allow(ctx, long+strconv.Itoa(i), l); err != nil || !r.Allowed {
			t.Fatalf("first request of long key %d: %+v, %v", i, r, err)
		}
	}
	if got := s.Len(); got != n {
		t.Errorf("Len() = %d after %d long keys, want %d", got, n, n)
	}
	held := 0
	for i := range s.shards {
		sh := &s.shards[i]
		for j := int32(1); j < sh.used; j++ {
			held += len(sh.at(j).key)
		}
	}
	if held > n*longkey.MaxLen {
		t.Errorf("the store holds %d bytes of keys for %d long keys, want at most %d", held, n, n*longkey.MaxLen)
	}

	key := long + "0"
	if r, err := lim.Allow(ctx, key, l); err != nil || r.Allowed {
		t.Errorf("second request of a long key: %+v, %v; want denied", r, err)
	}
	if r, err := lim.Allow(ctx, longkey.Hash(key), l); err != nil || !r.Allowed {
		t.Errorf("a short key equal to a long key's hash: %+v, %v; want its own state, admitted", r, err)
	}
	if ttl, err := s.TTL(ctx, key, l); err != nil || ttl != time.Minute {
		t.Errorf("TTL of a long key = %v, %v; want 1m0s", ttl, err)
	}
	if err := lim.Reset(ctx, key, l); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Allow(ctx, key, l); err != nil || !r.Allowed {
		t.Errorf("a long key after Reset: %+v, %v; want admitted", r, err)
	}
}

// TestAlgoIndex: algoIndex is 1 plus the index in sluice.Algorithms of
// the algorithm of a limit's Identity, 0 for one that is not there.
func TestAlgoIndex(t *testing.T) {
	for _, a := range append([]sluice.Algorithm{"", "leaky_bucket"}, sluice.Algorithms...) {
		want := slices.Index(sluice.Algorithms, sluice.Limit{Algorithm: a}.Identity().Algorithm) + 1
		if got := algoIndex(a); got != want {
			t.Errorf("algoIndex(%q) = %d, want %d", a, got, want)
		}
	}
	if got := algoIndex(sluice.SlidingLog); got != slidingLogIndex {
		t.Errorf("algoIndex(sliding_log) = %d, slidingLogIndex %d", got, slidingLogIndex)
	}
}

// TestPrefixLen: prefixLen finds where the client key starts in every
// form of entry key: known and unknown algorithms, periods in whole
// microseconds and not, names short and long, keys short, empty and
// hashed.
func TestPrefixLen(t *testing.T) {
	keys := []string{"", "k", "203.0.113.7", strings.Repeat("k", 128), strings.Repeat("k", 200)}
	limits := []sluice.Limit{
		sluice.PerSecond(5), sluice.PerHour(5).Using(sluice.GCRA).Named("n"),
		sluice.PerMinute(5).Using(sluice.SlidingLog).Named(strings.Repeat("n", 300)),
		{Algorithm: "leaky_bucket", Limit: 5, Period: 1500 * time.Nanosecond},
		{Algorithm: sluice.FixedWindow, Limit: 5, Period: 10 * 365 * 24 * time.Hour},
	}
	for _, key := range keys {
		ck := newClientKey(key)
		for _, l := range limits {
			k := appendEntryKey(nil, ck, l)
			if got, want := prefixLen(k), len(k)-len(ck.key); got != want || prefixLen(string(k)) != want {
				t.Errorf("%s, key of %d bytes: prefixLen = %d, want %d", l, len(key), got, want)
			}
		}
	}
}
