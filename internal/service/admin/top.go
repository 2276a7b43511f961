package admin

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/policy"
)

// The defaults of a Top.
const (
	// DefaultTopK is how many (rule, key) counters a Top keeps per
	// generation unless NewTop is told otherwise.
	DefaultTopK = 1000
	// DefaultGeneration is how long a Top's generation lasts: the counts
	// it reports cover the last one to two generations.
	DefaultGeneration = 5 * time.Minute
	// MaxKeyBytes is the longest client key a Top keeps as it is: a longer
	// one is kept as its first MaxKeyBytes bytes (or the few fewer that
	// end a character), "…" and its masked form
	// (policy.MaskKey of the whole key), so that a hostile key cannot make
	// the k counters hold more than k × MaxKeyBytes bytes of keys.
	MaxKeyBytes = 256
)

// Top counts, per rule and client key, the decisions that limited the
// key, and reports the most limited: a bounded heavy-hitters structure
// (Space-Saving, Metwally et al. 2005) of k counters, whatever the number
// of distinct keys. Each count is an upper bound of the true one, and the
// count minus its Error a lower bound; a key limited more than N/k times
// out of N counted decisions is always among the counters.
//
// Top counts the outcomes policy.Denied and policy.ShadowDenied (what a
// rule in shadow mode would have denied): the key was limited by that
// rule. Degraded outcomes are not counted (under on_error: deny an outage
// denies every key alike; the dashboard shows them as store health), nor
// DeniedByOther (another rule limited the key) nor Allowed, for which
// Observe returns at once.
//
// "Most limited" means recently: the counters live in two generations,
// the current one and the one before it; every generation (default
// DefaultGeneration) the older is dropped. A report covers the span since
// the older generation began, one to two generations.
//
// Top is safe for concurrent use. Its zero value is not usable: create it
// with NewTop.
type Top struct {
	k         int // counters per generation, set once: read without mu
	mu        sync.Mutex
	gen       time.Duration
	now       func() time.Time
	cur, prev *summary
	rules     map[string]string // rule names, interned: a counter copies only its key
	started   time.Time         // when cur began
	prevStart time.Time         // when prev began; zero while prev holds nothing
}

// TopOption configures a Top.
type TopOption func(*Top)

// WithGeneration sets how long a generation of a Top lasts (default
// DefaultGeneration); d <= 0 keeps the default.
func WithGeneration(d time.Duration) TopOption {
	return func(t *Top) {
		if d > 0 {
			t.gen = d
		}
	}
}

// WithTopClock sets the clock a Top reads (default time.Now), for tests.
func WithTopClock(now func() time.Time) TopOption {
	return func(t *Top) {
		if now != nil {
			t.now = now
		}
	}
}

// NewTop returns a Top of k counters per generation; k <= 0 means
// DefaultTopK. Its memory is allocated here, once: 2 × k counters.
func NewTop(k int, opts ...TopOption) *Top {
	if k <= 0 {
		k = DefaultTopK
	}
	t := &Top{k: k, gen: DefaultGeneration, now: time.Now}
	for _, o := range opts {
		o(t)
	}
	t.cur, t.prev = newSummary(k), newSummary(k)
	t.rules = map[string]string{}
	t.started = t.now()
	return t
}

// K returns how many counters a generation of t keeps.
func (t *Top) K() int { return t.k }

// Observe counts o for key under rule when o limited the key (Denied or
// ShadowDenied), and returns at once for every other outcome. It has the
// signature of a policy.Observer.
func (t *Top) Observe(rule, key string, o policy.Outcome) {
	if o != policy.Denied && o != policy.ShadowDenied {
		return
	}
	id, masked := topKey{rule, key}, ""
	if len(key) > MaxKeyBytes {
		masked = policy.MaskKey(key)
		id.key = cutAtRune(key, MaxKeyBytes) + "…" + masked
	}
	now := t.now()
	t.mu.Lock()
	t.rotate(now)
	if c, ok := t.cur.index[id]; ok {
		t.cur.bump(c, o == policy.ShadowDenied)
	} else {
		// A new key: its strings are copied, since a door may hand over
		// a key that aliases a request's buffer.
		t.cur.insert(topKey{t.intern(rule), strings.Clone(id.key)}, masked, o == policy.ShadowDenied)
	}
	t.mu.Unlock()
}

// TopEntry is one (rule, key) of a TopList.
type TopEntry struct {
	// Rule is the rule's name.
	Rule string
	// Key is the client key, in the clear (cut as MaxKeyBytes says).
	Key string
	// Masked is the key as policy.MaskKey shows it.
	Masked string
	// Count is how many decisions limited the key under the rule in the
	// span, at most: the true number is between Count-Error and Count.
	Count uint64
	// Error bounds Count's overestimate.
	Error uint64
	// Shadow says that the rule was in shadow mode at the key's last
	// counted decision: Count counts denials it would have made.
	Shadow bool
}

// TopList is what Top.Snapshot reports.
type TopList struct {
	// Since and Until bound the span the counts cover.
	Since, Until time.Time
	// K is the number of counters per generation.
	K int
	// Tracked is how many (rule, key) pairs the counters hold.
	Tracked int
	// Counted is how many limiting decisions were counted in the span.
	Counted uint64
	// Entries are the most limited pairs, by Count descending (then
	// Error ascending, rule and key).
	Entries []TopEntry
}

// Snapshot returns the n most limited (rule, key) pairs of the span (all
// of them when n <= 0).
func (t *Top) Snapshot(n int) TopList {
	now := t.now()
	t.mu.Lock()
	t.rotate(now)
	list := TopList{Since: t.started, Until: now, K: t.k, Counted: t.cur.total}
	all := make([]TopEntry, 0, len(t.cur.heap)+len(t.prev.heap))
	for _, c := range t.cur.heap {
		all = append(all, TopEntry{Rule: c.rule, Key: c.key, Masked: c.masked, Count: c.count, Error: c.err, Shadow: c.shadow})
	}
	if !t.prevStart.IsZero() {
		list.Since = t.prevStart
		list.Counted += t.prev.total
		// A key absent from a full generation was counted there at most
		// its smallest count, unknown how often.
		curMin, prevMin := t.cur.floor(), t.prev.floor()
		for i := range all {
			if _, ok := t.prev.index[topKey{all[i].Rule, all[i].Key}]; !ok {
				all[i].Count += prevMin
				all[i].Error += prevMin
			}
		}
		for _, c := range t.prev.heap {
			if in, ok := t.cur.index[c.topKey]; ok {
				e := &all[in.pos] // all holds cur.heap's counters in heap order
				e.Count += c.count
				e.Error += c.err
				continue
			}
			all = append(all, TopEntry{Rule: c.rule, Key: c.key, Masked: c.masked, Count: c.count + curMin, Error: c.err + curMin, Shadow: c.shadow})
		}
	}
	t.mu.Unlock()
	list.Tracked = len(all)
	slices.SortFunc(all, func(a, b TopEntry) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Error, b.Error), strings.Compare(a.Rule, b.Rule), strings.Compare(a.Key, b.Key))
	})
	if n > 0 && len(all) > n {
		all = all[:n:n]
	}
	for i := range all {
		if all[i].Masked == "" {
			all[i].Masked = policy.MaskKey(all[i].Key)
		}
	}
	list.Entries = all
	return list
}

// The errors of Top.Unmask.
var (
	// ErrUnknownMask reports a masked key that no key the Top tracks
	// masks to, or only one it keeps cut (over MaxKeyBytes).
	ErrUnknownMask = errors.New("unknown masked key")
	// ErrAmbiguousMask reports a masked key that several keys the Top
	// tracks mask to.
	ErrAmbiguousMask = errors.New("ambiguous masked key")
)

// Unmask returns the client key that masked, a key as policy.MaskKey
// shows it (the way sluice top and the dashboard show keys), stands for:
// the one key among those t tracks, under any rule, whose mask it is; or,
// when there is none, masked itself if t tracks it as a key (a client
// whose key merely looks masked). A mask is not reversible, so a key t
// does not track (never limited in its span, or pushed out of its
// counters) is unknown: the error wraps ErrUnknownMask, as for a key t
// keeps only cut (longer than MaxKeyBytes), or ErrAmbiguousMask when
// several keys mask to it; each says to give the key in the clear.
func (t *Top) Unmask(masked string) (string, error) {
	type tracked struct{ key, masked string }
	t.mu.Lock()
	keys := make([]tracked, 0, len(t.cur.heap)+len(t.prev.heap))
	for _, h := range [][]*counter{t.cur.heap, t.prev.heap} {
		for _, c := range h {
			keys = append(keys, tracked{c.key, c.masked})
		}
	}
	span := t.gen
	t.mu.Unlock()
	// Hashed without the lock: the doors' decisions must not wait on an
	// operator's question.
	var found []string
	cut, literal := false, false
	distinct := make(map[string]bool, len(keys))
	for _, k := range keys {
		distinct[k.key] = true
		switch {
		case k.masked != "":
			cut = cut || k.masked == masked
		case policy.MaskKey(k.key) == masked:
			if !slices.Contains(found, k.key) {
				found = append(found, k.key)
			}
		case k.key == masked:
			literal = true
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return "", fmt.Errorf("%w: %d keys this server's top tracks mask to %q; give the key in the clear", ErrAmbiguousMask, len(found), masked)
	case literal:
		return masked, nil
	case cut:
		return "", fmt.Errorf("%w: %q masks a key longer than %d bytes, which this server's top keeps cut; give the key in the clear", ErrUnknownMask, masked, MaxKeyBytes)
	}
	return "", fmt.Errorf("%w: none of the %d keys this server's top tracks (the most limited of the last %s to %s) masks to %q; give the key in the clear, or ask the server whose top showed it",
		ErrUnknownMask, len(distinct), policy.CompactDuration(span), policy.CompactDuration(2*span), masked)
}

// maxRules bounds the rule names a Top interns.
const maxRules = 4096

// intern returns rule as a string of t's own, copied once. Called with
// t.mu held.
func (t *Top) intern(rule string) string {
	if r, ok := t.rules[rule]; ok {
		return r
	}
	r := strings.Clone(rule)
	if len(t.rules) < maxRules {
		t.rules[r] = r
	}
	return r
}

// rotate starts a new generation when the current one is over: it
// becomes the older, and the older is dropped; after two generations
// without a call both are dropped. The new generation begins where the
// current one ended, not at now: after a pause the older then holds the
// counts of its own generation only, and a report never covers more
// than two. Called with t.mu held.
func (t *Top) rotate(now time.Time) {
	age := now.Sub(t.started)
	switch {
	case age < t.gen:
		return
	case age < 2*t.gen:
		t.prev, t.cur = t.cur, t.prev
		t.prevStart = t.started
		t.started = t.started.Add(t.gen)
	default:
		t.prev.reset()
		t.prevStart = time.Time{}
		t.started = now
	}
	t.cur.reset()
}

// topKey identifies a counter.
type topKey struct{ rule, key string }

// counter is one Space-Saving counter.
type counter struct {
	topKey
	masked     string // set for a key cut to MaxKeyBytes
	count, err uint64
	shadow     bool
	pos        int // index in summary.heap
}

// summary is one generation: k counters in a min-heap by count, indexed
// by key. Every count is incremented by one, so an update moves a
// counter down the heap by at most its height: O(log k).
type summary struct {
	k     int
	slab  []counter // the k counters, allocated once
	heap  []*counter
	index map[topKey]*counter
	total uint64 // decisions counted
}

func newSummary(k int) *summary {
	return &summary{k: k, slab: make([]counter, k), heap: make([]*counter, 0, k), index: make(map[topKey]*counter, k)}
}

// reset empties s, keeping its memory.
func (s *summary) reset() {
	s.heap = s.heap[:0]
	clear(s.index)
	s.total = 0
}

// floor is the count a key absent from s may have had in it: the
// smallest count once s is full (a key evicted, or never seen), else 0.
func (s *summary) floor() uint64 {
	if len(s.heap) < s.k {
		return 0
	}
	return s.heap[0].count
}

// bump counts one decision for the key of c.
func (s *summary) bump(c *counter, shadow bool) {
	s.total++
	c.count++
	c.shadow = shadow
	s.down(c.pos)
}

// insert counts one decision for id, a key s does not hold, keeping its
// strings. It takes a free counter, or the one with the smallest count,
// whose count it inherits as its error.
func (s *summary) insert(id topKey, masked string, shadow bool) {
	s.total++
	if len(s.heap) < s.k {
		c := &s.slab[len(s.heap)]
		*c = counter{topKey: id, masked: masked, count: 1, shadow: shadow, pos: len(s.heap)}
		s.heap = append(s.heap, c)
		s.index[id] = c
		s.up(c.pos)
		return
	}
	c := s.heap[0]
	delete(s.index, c.topKey)
	c.topKey, c.masked, c.shadow = id, masked, shadow
	c.err = c.count
	c.count++
	s.index[id] = c
	s.down(0)
}

func (s *summary) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].pos, s.heap[j].pos = i, j
}

func (s *summary) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.heap[p].count <= s.heap[i].count {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *summary) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.heap[r].count < s.heap[l].count {
			m = r
		}
		if s.heap[i].count <= s.heap[m].count {
			return
		}
		s.swap(i, m)
		i = m
	}
}
