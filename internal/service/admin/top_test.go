package admin

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/sluice-go/sluice/policy"
)

// zipfStream returns n keys drawn from a Zipf distribution of exponent s
// over distinct keys, with a fixed seed, and their true counts.
func zipfStream(n, distinct int, s float64, seed uint64) ([]string, map[string]uint64) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	// The Zipf CDF, sampled by binary search.
	cdf := make([]float64, distinct)
	sum := 0.0
	for i := range distinct {
		sum += 1 / math.Pow(float64(i+1), s)
		cdf[i] = sum
	}
	keys := make([]string, n)
	truth := map[string]uint64{}
	for i := range n {
		x := r.Float64() * sum
		j, _ := slices.BinarySearch(cdf, x)
		keys[i] = "k" + strconv.Itoa(j)
		truth[keys[i]]++
	}
	return keys, truth
}

// trueTop returns the n keys of truth with the largest counts (ties by
// key).
func trueTop(truth map[string]uint64, n int) []string {
	keys := make([]string, 0, len(truth))
	for k := range truth {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if truth[a] != truth[b] {
			if truth[a] > truth[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return keys[:min(n, len(keys))]
}

// checkBounds fails t unless every entry's true count lies in
// [Count-Error, Count], and every key counted more than n/k times is
// listed.
func checkBounds(t *testing.T, l TopList, truth map[string]uint64, n uint64) {
	t.Helper()
	listed := map[string]bool{}
	for _, e := range l.Entries {
		listed[e.Key] = true
		tr := truth[e.Key]
		if tr > e.Count || e.Count-e.Error > tr {
			t.Errorf("%s: count %d error %d, true %d: not in [count-error, count]", e.Key, e.Count, e.Error, tr)
		}
	}
	bound := n / uint64(l.K)
	for k, c := range truth {
		if c > bound && !listed[k] {
			t.Errorf("%s was counted %d times, more than N/k = %d, and is not listed", k, c, bound)
		}
	}
}

func TestTopSkewedStreams(t *testing.T) {
	for _, tc := range []struct {
		name     string
		k        int
		n        int
		distinct int
		s        float64
		exact    int // the true top-exact must be reported in order, with exact counts
	}{
		{"zipf 1.2, k=100", 100, 100_000, 10_000, 1.2, 10},
		{"zipf 1.5, k=50", 50, 100_000, 50_000, 1.5, 10},
		{"zipf 2, k=10", 10, 50_000, 100_000, 2, 3},
		{"zipf 1.1, k=1000", 1000, 200_000, 100_000, 1.1, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, truth := zipfStream(tc.n, tc.distinct, tc.s, 42)
			top := NewTop(tc.k, WithGeneration(time.Hour))
			for _, k := range keys {
				top.Observe("r", k, policy.Denied)
			}
			l := top.Snapshot(0)
			if l.Counted != uint64(tc.n) || len(l.Entries) > tc.k {
				t.Fatalf("counted %d over %d entries, want %d over at most k = %d", l.Counted, len(l.Entries), tc.n, tc.k)
			}
			checkBounds(t, l, truth, uint64(tc.n))
			want := trueTop(truth, tc.exact)
			for i, k := range want {
				e := l.Entries[i]
				if e.Key != k || e.Rule != "r" {
					t.Fatalf("entry %d is %s/%s (count %d), want r/%s (true %d): the top %d are %v", i, e.Rule, e.Key, e.Count, k, truth[k], tc.exact, want)
				}
				if e.Count-e.Error > truth[k] || e.Count < truth[k] {
					t.Errorf("%s: count %d error %d, true %d", k, e.Count, e.Error, truth[k])
				}
			}
		})
	}
}

// TestTopBoundedMemory: 1e5 distinct keys leave k counters, whose counts
// sum to the decisions counted (Space-Saving's invariant), and whose
// smallest count is at most N/k.
func TestTopBoundedMemory(t *testing.T) {
	const k, n = 100, 100_000
	top := NewTop(k, WithGeneration(time.Hour))
	for i := range n {
		top.Observe("r", "key-"+strconv.Itoa(i), policy.Denied)
	}
	l := top.Snapshot(0)
	if l.Tracked != k || len(l.Entries) != k || len(top.cur.index) != k || len(top.cur.heap) != k || cap(top.cur.heap) != k {
		t.Fatalf("tracked %d, entries %d, index %d, heap %d (cap %d): want k = %d each", l.Tracked, len(l.Entries), len(top.cur.index), len(top.cur.heap), cap(top.cur.heap), k)
	}
	var sum uint64
	for _, e := range l.Entries {
		sum += e.Count
		if e.Count-e.Error > 1 {
			t.Errorf("%s: count %d error %d, but every key was seen once", e.Key, e.Count, e.Error)
		}
	}
	if sum != n {
		t.Errorf("counts sum to %d, want %d", sum, n)
	}
	if min := top.cur.floor(); min > n/k {
		t.Errorf("smallest count %d, more than N/k = %d", min, n/k)
	}
}

// TestTopErrorGuarantee: on streams where heavy keys arrive late, after
// many distinct ones, and are interleaved with noise, every reported
// count is within its error of the truth, and the error within N/k.
func TestTopErrorGuarantee(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream func() []string
	}{
		{"heavy after noise", func() []string {
			var s []string
			for i := range 20_000 {
				s = append(s, "noise-"+strconv.Itoa(i))
			}
			for i := range 30_000 {
				s = append(s, "heavy-"+strconv.Itoa(i%5))
			}
			return s
		}},
		{"interleaved", func() []string {
			r := rand.New(rand.NewPCG(7, 8))
			var s []string
			for i := range 60_000 {
				if i%3 == 0 {
					s = append(s, "heavy-"+strconv.Itoa(r.IntN(8)))
				} else {
					s = append(s, "noise-"+strconv.Itoa(r.IntN(30_000)))
				}
			}
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const k = 64
			s := tc.stream()
			truth := map[string]uint64{}
			top := NewTop(k, WithGeneration(time.Hour))
			for _, key := range s {
				truth[key]++
				top.Observe("r", key, policy.Denied)
			}
			l := top.Snapshot(0)
			checkBounds(t, l, truth, uint64(len(s)))
			for _, e := range l.Entries {
				if e.Error > uint64(len(s))/k {
					t.Errorf("%s: error %d, more than N/k = %d", e.Key, e.Error, len(s)/k)
				}
			}
			heavy := 0
			for _, e := range l.Entries[:8] {
				if strings.HasPrefix(e.Key, "heavy-") {
					heavy++
				}
			}
			if want := min(8, strings.Count(strings.Join(trueTop(truth, 8), ","), "heavy-")); heavy != want {
				t.Errorf("%d heavy keys among the first 8 entries, want %d: %v", heavy, want, l.Entries[:8])
			}
		})
	}
}

// TestTopOutcomes: only the outcomes that limited the key count, each
// under its rule; Shadow tells a rule in shadow mode.
func TestTopOutcomes(t *testing.T) {
	top := NewTop(10)
	for _, o := range policy.Outcomes {
		for range 3 {
			top.Observe("login", "1.2.3.4", o)
		}
	}
	top.Observe("probe", "1.2.3.4", policy.ShadowDenied)
	l := top.Snapshot(0)
	want := []TopEntry{
		{Rule: "login", Key: "1.2.3.4", Masked: policy.MaskKey("1.2.3.4"), Count: 6, Shadow: true},
		{Rule: "probe", Key: "1.2.3.4", Masked: policy.MaskKey("1.2.3.4"), Count: 1, Shadow: true},
	}
	// login's last counted outcome was shadow_denied (the last of
	// policy.Outcomes that counts).
	if !slices.Equal(l.Entries, want) || l.Counted != 7 {
		t.Errorf("entries %+v counted %d, want %+v counted 7", l.Entries, l.Counted, want)
	}
	top = NewTop(10)
	for _, o := range []policy.Outcome{policy.Allowed, policy.DeniedByOther, policy.DegradedAllowed, policy.DegradedDenied} {
		top.Observe("r", "k", o)
	}
	if l := top.Snapshot(0); len(l.Entries) != 0 || l.Counted != 0 {
		t.Errorf("outcomes that did not limit the key were counted: %+v", l)
	}
	top.Observe("r", "k", policy.Denied)
	if l := top.Snapshot(0); len(l.Entries) != 1 || l.Entries[0].Shadow {
		t.Errorf("a denial: %+v, want one entry, not shadow", l.Entries)
	}
}

// fakeClock is a clock that tests move.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestTopGenerations: the counts cover the current generation and the
// one before; older ones are forgotten, and a key absent from a full
// generation carries that generation's smallest count as error.
func TestTopGenerations(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	start := clock.Now()
	top := NewTop(2, WithGeneration(time.Minute), WithTopClock(clock.Now))
	observe := func(key string, n int) {
		for range n {
			top.Observe("r", key, policy.Denied)
		}
	}
	counts := func() map[string][2]uint64 {
		m := map[string][2]uint64{}
		for _, e := range top.Snapshot(0).Entries {
			m[e.Key] = [2]uint64{e.Count, e.Error}
		}
		return m
	}
	observe("a", 10)
	observe("b", 4)
	clock.Add(61 * time.Second) // a new generation: a and b in the older
	observe("c", 5)
	observe("d", 3)
	l := top.Snapshot(0)
	if !l.Since.Equal(start) || l.Counted != 22 {
		t.Errorf("since %v counted %d, want %v and 22", l.Since, l.Counted, start)
	}
	// Both generations are full (k = 2): a key absent from one may have
	// been counted there up to its smallest count (4 in the older, 3 in
	// the current).
	want := map[string][2]uint64{"a": {13, 3}, "c": {9, 4}, "b": {7, 3}, "d": {7, 4}}
	if got := counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("across two generations: %v, want %v", got, want)
	}
	clock.Add(61 * time.Second) // a and b are forgotten
	observe("c", 1)
	want = map[string][2]uint64{"c": {6, 0}, "d": {3, 0}}
	if got := counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a generation later: %v, want %v", got, want)
	}
	clock.Add(10 * time.Minute) // idle: everything is forgotten
	if l := top.Snapshot(0); len(l.Entries) != 0 || l.Counted != 0 || !l.Since.Equal(clock.Now()) {
		t.Errorf("after 10 idle minutes: %+v, want nothing since now", l)
	}
}

// TestTopLongKeys: a key longer than MaxKeyBytes is kept cut, with its
// masked form that of the whole key, and keys that differ only past the
// cut are counted apart.
func TestTopLongKeys(t *testing.T) {
	top := NewTop(10)
	long := strings.Repeat("x", 10_000)
	top.Observe("r", long+"1", policy.Denied)
	top.Observe("r", long+"2", policy.Denied)
	top.Observe("r", long+"2", policy.Denied)
	l := top.Snapshot(0)
	if len(l.Entries) != 2 {
		t.Fatalf("entries %d, want 2", len(l.Entries))
	}
	e := l.Entries[0]
	if e.Count != 2 || e.Masked != policy.MaskKey(long+"2") || len(e.Key) > MaxKeyBytes+len("…")+len(e.Masked) || !strings.HasPrefix(e.Key, long[:MaxKeyBytes]) {
		t.Errorf("long key kept as %d bytes %q..., masked %s, count %d", len(e.Key), e.Key[:20], e.Masked, e.Count)
	}
}

// collidingKeys are two keys with one mask: 48 bits of SHA-256, found by
// Brent's cycle search over k -> "k" + the hex of k's mask.
var collidingKeys = [2]string{"k46db62410c90", "k4c6199a87ff4"}

// TestTopUnmask: a masked key resolves to the one key the Top tracks
// under any rule (in either generation) whose mask it is, or to itself
// when it is a tracked key that merely looks masked; a mask of no tracked
// key, of a key kept cut, or of two keys is an error saying so.
func TestTopUnmask(t *testing.T) {
	if a, b := policy.MaskKey(collidingKeys[0]), policy.MaskKey(collidingKeys[1]); a != b {
		t.Fatalf("the colliding keys mask to %s and %s", a, b)
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	top := NewTop(10, WithGeneration(time.Minute), WithTopClock(clock.Now))
	long := strings.Repeat("x", MaxKeyBytes+1)
	literal := policy.MaskKey("some other key") // a key that looks masked
	top.Observe("login", "old-team", policy.Denied)
	clock.Add(61 * time.Second) // old-team is in the older generation
	for _, k := range []string{"team-a", long, literal, collidingKeys[0], collidingKeys[1]} {
		top.Observe("api", k, policy.Denied)
	}
	top.Observe("login", "team-a", policy.ShadowDenied) // the same key under another rule
	top.Observe("api", "passed", policy.Allowed)        // never limited: not tracked
	for _, tt := range []struct {
		masked, want string
		err          error
		msg          string
	}{
		{policy.MaskKey("team-a"), "team-a", nil, ""},
		{policy.MaskKey("old-team"), "old-team", nil, ""},
		{literal, literal, nil, ""},
		{policy.MaskKey("passed"), "", ErrUnknownMask,
			`unknown masked key: none of the 6 keys this server's top tracks (the most limited of the last 1m to 2m) masks to "` + policy.MaskKey("passed") + `"; give the key in the clear, or ask the server whose top showed it`},
		{policy.MaskKey(long), "", ErrUnknownMask,
			`unknown masked key: "` + policy.MaskKey(long) + `" masks a key longer than 256 bytes, which this server's top keeps cut; give the key in the clear`},
		{policy.MaskKey(collidingKeys[0]), "", ErrAmbiguousMask,
			`ambiguous masked key: 2 keys this server's top tracks mask to "` + policy.MaskKey(collidingKeys[0]) + `"; give the key in the clear`},
	} {
		got, err := top.Unmask(tt.masked)
		switch {
		case tt.err == nil && (err != nil || got != tt.want):
			t.Errorf("Unmask(%s) = %q, %v; want %q", tt.masked, got, err, tt.want)
		case tt.err != nil && (!errors.Is(err, tt.err) || err.Error() != tt.msg):
			t.Errorf("Unmask(%s) = %q, %v; want the error %s", tt.masked, got, err, tt.msg)
		}
	}
}

// TestTopKeyCopied: a key whose bytes the caller reuses afterwards (a
// request buffer) is kept as it was.
func TestTopKeyCopied(t *testing.T) {
	top := NewTop(10)
	rule, key := []byte("login"), []byte("client-a")
	// The strings alias the buffers, as a door's decoder without copies
	// hands them over.
	top.Observe(unsafe.String(&rule[0], len(rule)), unsafe.String(&key[0], len(key)), policy.Denied)
	copy(rule, "LOGIN")
	copy(key, "CLIENT-B")
	if e := top.Snapshot(0).Entries[0]; e.Rule != "login" || e.Key != "client-a" {
		t.Errorf("kept %q %q, want login client-a", e.Rule, e.Key)
	}
}

// TestTopConcurrent: concurrent Observe and Snapshot lose no count (run
// with -race).
func TestTopConcurrent(t *testing.T) {
	const workers, each = 8, 5000
	top := NewTop(50, WithGeneration(time.Hour))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var snaps sync.WaitGroup
	snaps.Add(1)
	go func() {
		defer snaps.Done()
		for {
			select {
			case <-stop:
				return
			default:
				l := top.Snapshot(10)
				if len(l.Entries) > 10 || l.Tracked > 50 {
					t.Errorf("snapshot of %d entries, %d tracked", len(l.Entries), l.Tracked)
					return
				}
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				top.Observe("r"+strconv.Itoa(w%2), "k"+strconv.Itoa(i%200), policy.Denied)
				top.Observe("r", "k", policy.Allowed)
			}
		}()
	}
	wg.Wait()
	close(stop)
	snaps.Wait()
	l := top.Snapshot(0)
	var sum uint64
	for _, e := range l.Entries {
		sum += e.Count
	}
	if l.Counted != workers*each || sum != workers*each {
		t.Errorf("counted %d, counts sum to %d, want %d", l.Counted, sum, workers*each)
	}
}

func BenchmarkTopObserve(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "203.0.113." + strconv.Itoa(i)
	}
	for _, bc := range []struct {
		name    string
		outcome policy.Outcome
		keys    int
	}{
		{"allowed", policy.Allowed, 1},
		{"denied/one-key", policy.Denied, 1},
		{"denied/100-keys", policy.Denied, 100},
		{"denied/65536-keys", policy.Denied, len(keys)}, // more than k: evictions
	} {
		b.Run(bc.name, func(b *testing.B) {
			top := NewTop(DefaultTopK)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				top.Observe("login", keys[i%bc.keys], bc.outcome)
				i++
			}
		})
	}
	b.Run("denied/parallel-100-keys", func(b *testing.B) {
		top := NewTop(DefaultTopK)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				top.Observe("login", keys[i%100], policy.Denied)
				i++
			}
		})
	})
}

func BenchmarkTopSnapshot(b *testing.B) {
	top := NewTop(DefaultTopK)
	for i := range 5000 {
		top.Observe("login", strconv.Itoa(i), policy.Denied)
	}
	b.ReportAllocs()
	for b.Loop() {
		top.Snapshot(DefaultTopN)
	}
}

// TestTopKConcurrent: K, which every stats and top request reads, is safe
// while Observe rotates generations (run with -race).
func TestTopKConcurrent(t *testing.T) {
	// Each reading of the clock is a generation later: every Observe
	// swaps the current generation with the older.
	var ticks atomic.Int64
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return start.Add(time.Duration(ticks.Add(1)) * time.Minute) }
	top := NewTop(7, WithGeneration(time.Minute), WithTopClock(clock))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 2000 {
			top.Observe("r", strconv.Itoa(i), policy.Denied)
		}
	}()
	for range 2000 {
		if k := top.K(); k != 7 {
			t.Fatalf("K() = %d, want 7", k)
		}
	}
	wg.Wait()
}

// TestTopLongKeyCutAtRune: a long key is cut between two characters,
// never inside one.
func TestTopLongKeyCutAtRune(t *testing.T) {
	top := NewTop(10)
	long := "x" + strings.Repeat("é", 1000)
	top.Observe("r", long, policy.Denied)
	e := top.Snapshot(0).Entries[0]
	if !utf8.ValidString(e.Key) || !strings.HasPrefix(e.Key, long[:MaxKeyBytes-1]+"…") || e.Masked != policy.MaskKey(long) {
		t.Errorf("long key kept as %q, masked %s", e.Key, e.Masked)
	}
}

// TestTopSpanAfterIdle: after a pause of nearly two generations, the
// generations stay aligned: a report never covers more than the last two
// generations, so a key limited before them is forgotten.
func TestTopSpanAfterIdle(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const gen = 5 * time.Minute
	top := NewTop(10, WithGeneration(gen), WithTopClock(clock.Now))
	top.Observe("r", "old", policy.Denied)    // at 0
	clock.Add(9*time.Minute + 54*time.Second) // 9.9 min
	top.Observe("r", "new", policy.Denied)    //
	clock.Add(4*time.Minute + 54*time.Second) // 14.8 min
	l := top.Snapshot(0)
	if span := l.Until.Sub(l.Since); span > 2*gen {
		t.Errorf("the report covers %v, more than two generations (%v)", span, 2*gen)
	}
	for _, e := range l.Entries {
		if e.Key == "old" {
			t.Errorf("the key limited 14.8 minutes ago is still listed: %+v", l.Entries)
		}
	}
	if len(l.Entries) != 1 || l.Entries[0].Key != "new" {
		t.Errorf("entries %+v, want new", l.Entries)
	}
}
