// Package memory is a sluice.Store that keeps its state in the process: the
// store for a single replica, for tests, and the local fallback of a Limiter
// whose Redis store fails.
//
// A limit enforced by this store holds per process: behind a load balancer
// with N replicas each replica counts alone, and clients get up to N × limit.
// Use the Redis store (package store/redis) when more than one process
// serves the traffic.
//
// The store is safe for concurrent use. Its state is split into shards locked
// independently; all limits of one key live in one shard, so a multi-limit
// decision is atomic. It is a sluice.OneTaker: a Limiter's Allow and AllowN
// over it allocate nothing once a key has its entry (BenchmarkAllow,
// BenchmarkManyKeys). Its Peek reads a request's
// Results without deciding, creating, converting or touching anything
// (see Store.Peek). Every piece of state carries the shortest sufficient
// lifetime (until it would be equivalent to no state at all), and state
// that has been expired for over a minute is evicted as the store is used,
// so idle keys do not accumulate. The minute of grace keeps a clock that
// steps back by less than that from handing out anything new: the state it
// steps back into is still there, whichever entries eviction happened to
// sample. A client key longer than 128 bytes is kept as a fixed-length hash
// of itself, as the Redis store keeps it, so that huge keys cannot bloat
// the store.
//
// # Memory
//
// The store holds at most its capacity of entries, one per client key and
// limit identity (name, algorithm, period): DefaultCapacity (524,288)
// unless WithCapacity says otherwise. Each shard holds its share of it
// and, when full, forgets its least recently used entry for each new one;
// Evictions counts them. A shard may fill before the store does (500,000
// distinct keys into the default store evicted a few dozen). Forgetting is what expiry does too, early: the
// key's next request starts afresh, with a full quota. That is the worst
// case a flood of distinct keys (one per client address, or keys the
// clients choose) can cause: it cannot grow memory past the capacity, but
// a real client whose key is not used while about capacity more distinct
// keys arrive (at 50,000 new keys a second, about 10 s for the default)
// loses its count and may be admitted up to its limit again. Size the
// capacity above the number of keys active over the longest period your
// limits use, and watch Evictions (sluice_memory_evictions_total).
//
// An entry costs about 90 bytes of live heap plus its key (the client
// key, the limit's name and a few bytes, rounded up to an allocation size
// class): 108 bytes an entry in all with 8- to 11-byte client keys and a
// 6-byte name, 229 with 128-byte keys, the longest kept as they are
// (BenchmarkFullStore; TestHeapPerKey measures 112 at 200,000 keys, 123
// before entries other than sliding_log's lost their pointer to a log,
// and the store kept 207 to 281 before it was bounded). A full store of
// the default capacity thus holds about 55 MiB of live heap with
// address-sized keys and 115 MiB with 128-byte keys and a short name (a
// longer name adds its length to every entry), and the process's RSS,
// with the collector's headroom (GOGC), about twice that: 127 MiB
// measured after 2,000,000 distinct keys (at 119 bytes an entry), where
// the unbounded store held 698 MiB. A sliding_log entry also holds 8
// bytes (up to 16, with slice growth) per request it admitted within its
// period, in a map of its shard's logs, and state expired for under a
// minute counts against the capacity until it is evicted. Memory returns as entries go: a shard
// that falls to a quarter of its peak (of 256 entries or more) rebuilds
// its tables (once a flood's state had expired, Sweep took the live heap
// from 63 MiB to none and the RSS fell from 131 MiB to 9 MiB within 5 s;
// the unbounded store kept 383 MiB of live heap). A process that may go idle after a flood runs
// SweepEvery, since decisions do the evicting otherwise.
//
// The keys and memory guide is docs/keys.md (https://github.com/sluice-go/sluice/blob/main/docs/keys.md).
package memory

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/longkey"
)

// DefaultCapacity is the number of entries (client key × limit identity)
// a Store holds at most unless WithCapacity says otherwise: 2^19; see the
// package documentation for what that costs.
const DefaultCapacity = 1 << 19

// minShardCapacity is the fewest entries a shard holds: a capacity below
// minShardCapacity × shards is split over fewer shards, so that a small
// store is still close to one LRU over all its keys.
const minShardCapacity = 64

// Store is an in-process sluice.Store. Create it with New; the zero value is
// not usable.
type Store struct {
	shards   []shard
	seed     maphash.Seed
	now      func() time.Time // WithClock's; nil: the monotonic clock (micros)
	epoch    time.Time        // when the Store was made, with its monotonic reading
	epochNs  int64            // epoch in ns since 1970
	capacity int
}

// shard is one independently locked part of the store, padded so that
// two shards never share a cache line.
//
// Its entries live in nodes, in chunks of chunkSize indexed by int32 (no
// pointer per entry, nothing for the collector to trace but the key and a
// sliding_log's log, and no more than a chunk to spare), linked in a list from the most recently
// used to the least: node 0 is the list's head, whose next is the most
// recently used entry and whose prev the least. Free nodes are linked by
// next from free. tab finds an entry by its key: an open-addressing table
// (linear probing) of slots, each the low 32 bits of the hash of an
// entry's key (which also give its home slot) and the entry's node; 0 is
// an empty slot. It costs 8 bytes a slot, at most 3/4 of them full (3/8
// once the table doubles, fewer as entries go until the shard is rebuilt),
// where a Go map of the same would cost about 40 bytes an entry.
type shard struct {
	mu        sync.Mutex
	seed      maphash.Seed // the Store's, to hash entry keys
	tab       []uint64
	chunks    [][]node
	used      int32             // nodes handed out, the head included
	free      int32             // first free node, 0 if none
	n         int               // entries held
	cap       int               // most entries held after a decision
	peak      int               // most entries held since the shard was last built
	ops       uint64            // decisions, to space out eviction
	evictions uint64            // live entries forgotten because the shard was full
	key       []byte            // the prefix of a long key's entry key in TakeOne, reused
	logs      map[int32][]int64 // the logs of sliding_log entries, by node
	last      lastLimit         // the limit of TakeOne's last decision
}

// lastLimit is what TakeOne works out of a limit (a division, the entry
// keys' prefix), kept for the next decision of its shard under the same
// limit: most decisions in a shard are of one limit, or of a few.
type lastLimit struct {
	limit  sluice.Limit
	spec   algo.Spec
	prefix []byte // appendEntryKey of an empty client key; empty: no limit yet
	hash   uint64 // maphash of prefix
}

// Nodes come in chunks of chunkSize (8 KiB); the first chunk grows up to
// that size as it fills, so that an idle shard costs little.
const (
	chunkBits = 7
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// node is one entry: the state of a client key under a limit identity.
// A sliding_log entry's log is in its shard's logs, so that the entries of
// the other algorithms, most of them, carry no pointer for it: 56 bytes.
type node struct {
	key        string // the entry key; "" while the node is free
	a, b, c    int64  // algo.State's A, B and C
	expires    int64  // µs; the state is gone at and after this instant
	prev, next int32
}

// logged reports whether an entry of key k is a sliding_log's, whose log
// is in its shard's logs (see appendEntryKey: the first byte's low bits
// are the algorithm's index).
func logged(k string) bool {
	return len(k) > 0 && (int(k[0]&7) == slidingLogIndex || int(k[0]&7) == concurrencyIndex)
}

// slidingLogIndex and concurrencyIndex are algoIndex of sluice.SlidingLog
// and sluice.Concurrency, whose entries keep a log.
const (
	slidingLogIndex  = 3
	concurrencyIndex = 6
)

// state returns the algo.State node i holds.
func (sh *shard) state(i int32) algo.State {
	n := sh.at(i)
	st := algo.State{Set: true, A: n.a, B: n.b, C: n.c}
	if logged(n.key) {
		st.Log = sh.logs[i]
	}
	return st
}

// set stores st in node i, to expire at expires.
func (sh *shard) set(i int32, st *algo.State, expires int64) {
	n := sh.at(i)
	n.a, n.b, n.c, n.expires = st.A, st.B, st.C, expires
	if logged(n.key) {
		sh.setLog(i, st.Log)
	}
}

// setLog keeps l as the log of node i, a sliding_log entry.
func (sh *shard) setLog(i int32, l []int64) {
	switch {
	case l != nil && sh.logs == nil:
		sh.logs = map[int32][]int64{i: l}
	case l != nil:
		sh.logs[i] = l
	default:
		delete(sh.logs, i)
	}
}

// appendEntryKey appends to b the key of client key ck's state under l's
// identity (name, algorithm and period, so that a limit whose Limit or
// Burst changes keeps its state). A first byte holds the algorithm's
// index in sluice.Algorithms (0: unknown, spelled out after it), whether
// the client key is a long key's hash (so that it differs from a short
// key equal to that hash) and whether the period is a whole number of
// microseconds, which follows (else nanoseconds); then the name with its
// length, and the client key, bounded by longkey.Bound. The encoding is
// prefix-free up to the client key, so two entries share a key only if
// they share client key and identity. It holds no more than the name and
// the client key and a few bytes: no copy of the Limit per entry.
func appendEntryKey(b []byte, ck clientKey, l sluice.Limit) []byte {
	// l.Identity(), without building it: the algorithm, "" read as
	// TokenBucket, the period and the name.
	a := algoIndex(l.Algorithm)
	flags := byte(a)
	if ck.hashed {
		flags |= hashedFlag
	}
	period := l.Period
	if a == concurrencyIndex {
		period = 0 // a slot's lease is no part of the identity
	}
	micros := period >= 0 && period%time.Microsecond == 0
	if !micros {
		flags |= 1 << 4
	}
	b = append(b, flags)
	if a == 0 {
		b = binary.AppendUvarint(b, uint64(len(l.Algorithm)))
		b = append(b, l.Algorithm...)
	}
	if micros {
		b = binary.AppendUvarint(b, uint64(period/time.Microsecond))
	} else {
		b = binary.AppendVarint(b, int64(period))
	}
	b = binary.AppendUvarint(b, uint64(len(l.Name)))
	b = append(b, l.Name...)
	return append(b, ck.key...)
}

// hashedFlag is the bit of an entry key's first byte that says its client
// key is a long key's hash.
const hashedFlag = 1 << 3

// algoIndex returns 1 plus the index in sluice.Algorithms of a, read as
// Identity reads it ("" is TokenBucket), or 0 for an unknown algorithm.
func algoIndex(a sluice.Algorithm) int {
	switch a {
	case sluice.FixedWindow:
		return 1
	case sluice.SlidingWindow:
		return 2
	case sluice.SlidingLog:
		return 3
	case "", sluice.TokenBucket:
		return 4
	case sluice.GCRA:
		return 5
	case sluice.Concurrency:
		return concurrencyIndex
	}
	return 0
}

// clientKey is a client key as the store keeps it: bounded, and whether
// that made it a hash.
type clientKey struct {
	key    string
	hashed bool
}

func newClientKey(key string) clientKey {
	return clientKey{longkey.Bound(key), longkey.Hashed(key)}
}

// Every evictEvery-th decision in a shard inspects up to evictSample
// entries of it at the end of its least-recently-used list and as many
// anywhere in it, beyond the ones it touches, and deletes those expired
// for over evictGrace: that keeps such entries below about half of the
// shard under any steady load, without scanning the table on every
// decision.
const (
	evictEvery  = 8
	evictSample = 2 * evictEvery
	evictGrace  = int64(time.Minute / time.Microsecond) // how long expired state is kept
)

// A shard whose table has held at least shrinkMin entries is rebuilt at
// its current size when it holds a quarter of its peak or less, so that
// memory returns after a flood (its table and chunks only grow otherwise).
const shrinkMin = 256

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock used when a request carries no time, and for
// expiry (TTL and Sweep). The default is time.Now as it read when the
// Store was made, advanced by the monotonic clock (see micros).
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithShards sets the number of independently locked shards (rounded up to
// a power of two; default 256). A capacity too small to give every shard
// 64 entries uses fewer shards (see WithCapacity).
func WithShards(n int) Option {
	return func(s *Store) {
		p := 1
		for p < n {
			p *= 2
		}
		s.shards = make([]shard, p)
	}
}

// WithCapacity sets the most entries (client key × limit identity) the
// store holds; below 1, DefaultCapacity. The capacity is split evenly over
// the shards, using fewer of them if each would hold fewer than 64
// entries: a shard holds at most ceil(n / shards) entries, so the store
// holds at most n + shards − 1 (plus, for an instant, the new entries of
// one decision; a decision with more entries in a shard than it holds
// keeps them all until the shard's next decision), and a shard that is
// full forgets its least recently used entry for each new one (see
// Evictions). Forgetting is what the store
// does to state that expired: the key's next request starts afresh.
func WithCapacity(n int) Option {
	return func(s *Store) { s.capacity = n }
}

// New returns an empty Store that holds at most DefaultCapacity entries,
// or the capacity of WithCapacity.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), epoch: time.Now()}
	s.epochNs = s.epoch.UnixNano()
	for _, o := range opts {
		o(s)
	}
	if s.capacity < 1 {
		s.capacity = DefaultCapacity
	}
	n := len(s.shards)
	if n == 0 {
		n = 256
	}
	for n > 1 && s.capacity/n < minShardCapacity {
		n /= 2
	}
	if n != len(s.shards) {
		s.shards = make([]shard, n)
	}
	per := s.capacity / n
	if s.capacity%n != 0 {
		per++
	}
	per = min(per, math.MaxInt32-1, math.MaxInt/n) // node indexes are int32; Capacity fits an int
	for i := range s.shards {
		s.shards[i].init(s.seed, per, 0)
	}
	return s
}

// init makes sh an empty shard of capacity per, with room for n entries.
func (sh *shard) init(seed maphash.Seed, per, n int) {
	sh.seed, sh.cap = seed, per
	sh.tab = make([]uint64, tableSize(n))
	sh.chunks = make([][]node, 1, 1+(n+1)/chunkSize)
	sh.chunks[0] = make([]node, 1, min(n+1, chunkSize))
	sh.used, sh.free, sh.n, sh.peak = 1, 0, 0, 0
}

func (s *Store) shard(key string) *shard {
	return &s.shards[s.shardIndex(key)]
}

func (s *Store) shardIndex(key string) int {
	return s.shardOf(maphash.String(s.seed, key))
}

// shardOf returns the index of the shard of a client key of hash h.
func (s *Store) shardOf(h uint64) int { return int(h & uint64(len(s.shards)-1)) }

// micros returns t in µs since 1970, or the store's clock's time when t
// is zero. The default clock reads time.Now once, when the Store is made,
// and then counts on the monotonic clock alone: time.Since of a time with
// a monotonic reading asks the system for that clock only, where time.Now
// asks for the wall clock as well, which was a quarter of a decision's
// time (pprof of BenchmarkAllow). A step of the wall clock (a correction
// by hand, a leap) is not seen: a limiter wants the time that passed,
// which is what the monotonic clock measures.
func (s *Store) micros(t time.Time) int64 {
	if !t.IsZero() {
		return t.UnixMicro()
	}
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return (s.epochNs + int64(time.Since(s.epoch))) / 1000
}

// Take implements sluice.Store. A request of several parts locks the
// shards of all their keys, in shard order, so it is atomic too.
func (s *Store) Take(_ context.Context, req sluice.Request) ([]sluice.Result, error) {
	if err := needsSlot(req); err != nil {
		return nil, err
	}
	rs, _ := s.take(req)
	return rs, nil
}

// needsSlot refuses a request whose Slot the store cannot hold
// (sluice.Request's CheckSlot).
func needsSlot(req sluice.Request) error {
	if err := req.CheckSlot(); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	return nil
}

// slotHash returns the number a Concurrency state keeps for slot: a hash
// of its name, never 0 (which names no slot: algo.Release's first to end).
func (s *Store) slotHash(slot string) int64 {
	if slot == "" {
		return 0
	}
	return int64(maphash.String(s.seed, slot) | 1)
}

// take is Take, and returns the instant it decided at: req.Now, or the
// store's clock read once the shards are locked, so that the decisions of
// a key run at instants in the order they run in (a clock read before
// waiting for a lock could be older than the instant of a decision that
// took the lock first).
func (s *Store) take(req sluice.Request) ([]sluice.Result, int64) {
	if len(req.Parts) == 1 && len(req.Parts[0].Limits) == 1 && req.Parts[0].Limits[0].Algorithm != sluice.Concurrency {
		p := req.Parts[0]
		r, now := s.takeOne(p.Key, p.Limits[0], p.Cost, req.Now)
		return []sluice.Result{r}, now
	}
	n := req.Len()
	rs := make([]sluice.Result, n)
	var buf [4]decision // most decisions have a limit or two: no allocation
	var work []decision
	if n <= len(buf) {
		work = buf[:n]
	} else {
		work = make([]decision, n)
	}
	var shards [4]int // most decisions lock a shard or two: no allocation
	var scratch [256]byte
	keys, locked := s.lock(req.Parts, work, scratch[:0], shards[:0])
	defer s.unlock(locked)
	now := s.micros(req.Now)

	allowed := true
	slot := s.slotHash(req.Slot)
	i := 0
	for _, p := range req.Parts {
		for _, l := range p.Limits {
			d := &work[i]
			d.read(keys[d.k0:d.k1], l, now)
			rs[i], d.next, d.ttl = algo.CheckSlot(l, d.st, now, int64(p.Cost), slot)
			allowed = allowed && rs[i].Allowed
			i++
		}
	}
	if allowed {
		for i := range work {
			d := &work[i]
			d.save(keys[d.k0:d.k1], d.next, d.ttl, now)
		}
	} else {
		// Nothing is consumed: the limits that would have admitted the
		// request report their state as it is.
		asIs(req.Parts, work, rs, now)
	}
	// The decision is done: the entries it touched are the most recently
	// used of their shards, and no node index of work is used any more.
	// A shard keeps every entry of the decision even above its capacity
	// (a later decision evicts them): forgetting some would undo part of
	// the decision, and with a capacity below a request's limits, let
	// every request through.
	for _, x := range locked {
		sh := &s.shards[x]
		keep := sh.cap
		if len(work) > keep {
			n := 0
			for i := range work {
				if work[i].sh == sh && work[i].i != 0 {
					n++
				}
			}
			keep = max(keep, n)
		}
		sh.settle(keep, now)
	}
	return rs, now
}

// TakeOne implements sluice.OneTaker: Take of a request of one key under
// one limit, without allocating (unless a new key needs an entry).
// It decides in one shard, that of key.
func (s *Store) TakeOne(_ context.Context, key string, l sluice.Limit, cost int, at time.Time) (sluice.Result, error) {
	if l.Algorithm == sluice.Concurrency && cost > 0 {
		return sluice.Result{}, needsSlot(sluice.Request{Parts: []sluice.Part{{Key: key, Limits: []sluice.Limit{l}, Cost: cost}}})
	}
	r, _ := s.takeOne(key, l, cost, at)
	return r, nil
}

// takeOne is TakeOne, and returns the instant it decided at (see take).
func (s *Store) takeOne(key string, l sluice.Limit, cost int, at time.Time) (sluice.Result, int64) {
	ck := newClientKey(key)
	hc := maphash.String(s.seed, ck.key)
	sh := &s.shards[s.shardOf(hc)]
	sh.mu.Lock()
	now := s.micros(at)
	m := &sh.last
	if len(m.prefix) == 0 || m.limit != l {
		p := appendEntryKey(m.prefix[:0], clientKey{}, l)
		*m = lastLimit{limit: l, spec: algo.SpecOf(l), prefix: p, hash: maphash.Bytes(s.seed, p)}
	}
	sp := &m.spec
	// The entry key is pre followed by ck.key (appendEntryKey), its hash h
	// (entryHash).
	pre, h := m.prefix, mixHash(hc, m.hash)
	if ck.hashed {
		pre = append(sh.key[:0], pre...)
		pre[0] |= hashedFlag
		sh.key = pre
		h = mixHash(hc, maphash.Bytes(s.seed, pre))
	}
	var st algo.State
	i := sh.findSplit(pre, ck.key, h)
	if i != 0 {
		if e := sh.at(i); e.expires > now {
			st = sh.state(i)
		}
		sh.touch(i)
	}
	if sp.Stale(&st) {
		var ttl int64
		st, ttl, _ = sp.Convert(st, now)
		i = sh.putSplit(i, pre, ck.key, h, &st, ttl, now)
	}
	var out algo.Outcome
	sp.Check(&st, now, int64(cost), &out)
	if out.R.Allowed {
		sh.putSplit(i, pre, ck.key, h, &out.Next, out.TTL, now)
	}
	// The entry is the most recently used: a shard of capacity 1 or more
	// keeps it (see Take).
	sh.settle(sh.cap, now)
	sh.mu.Unlock()
	return out.R, now
}

// put stores st for ttl µs from now as the state of entry key k, whose
// hash is h and whose node is i (0: none), deleting it when ttl <= 0, and
// returns its node (0: none).
func (sh *shard) put(i int32, k []byte, h uint64, st *algo.State, ttl, now int64) int32 {
	return sh.putSplit(i, k, "", h, st, ttl, now)
}

// putSplit is put of the entry key pre followed by ck.
func (sh *shard) putSplit(i int32, pre []byte, ck string, h uint64, st *algo.State, ttl, now int64) int32 {
	switch {
	case ttl <= 0:
		if i != 0 {
			sh.remove(i)
		}
		return 0
	case i == 0:
		i = sh.insert(string(pre)+ck, h)
	}
	sh.set(i, st, now+ttl)
	return i
}

// settle ends a decision in sh: it forgets the least recently used
// entries above keep, and every evictEvery-th decision evicts what has
// expired among a sample of entries and rebuilds the shard if it has
// shrunk enough.
func (sh *shard) settle(keep int, now int64) {
	for sh.n > keep {
		i := sh.at(0).prev
		if sh.at(i).expires > now { // expired state is no loss
			sh.evictions++
		}
		sh.remove(i)
	}
	if sh.ops++; sh.ops%evictEvery == 0 {
		sh.evict(now, evictSample)
		sh.shrink()
	}
}

// lock fills in the shard and entry key of every limit of parts in work,
// the keys appended to keys, locks the shards they live in, each once and
// in shard order (so that two requests never wait for each other in a
// cycle), and returns keys and the shards' indexes, appended to idx, for
// unlock.
func (s *Store) lock(parts []sluice.Part, work []decision, keys []byte, idx []int) ([]byte, []int) {
	i := 0
	for _, p := range parts {
		ck := newClientKey(p.Key)
		x := s.shardIndex(ck.key)
		if !slices.Contains(idx, x) {
			idx = append(idx, x)
		}
		for _, l := range p.Limits {
			d := &work[i]
			d.sh, d.k0 = &s.shards[x], len(keys)
			keys = appendEntryKey(keys, ck, l)
			d.k1 = len(keys)
			d.h = entryHash(s.seed, keys[d.k0:d.k1])
			i++
		}
	}
	slices.Sort(idx)
	for _, x := range idx {
		s.shards[x].mu.Lock()
	}
	return keys, idx
}

// unlock unlocks the shards lock locked.
func (s *Store) unlock(idx []int) {
	for _, x := range idx {
		s.shards[x].mu.Unlock()
	}
}

// asIs replaces the Result of each limit of parts that would have
// admitted a denied request by its state as it is at now (cost 0), read
// from work: what a denial reports of them.
func asIs(parts []sluice.Part, work []decision, rs []sluice.Result, now int64) {
	i := 0
	for _, p := range parts {
		for _, l := range p.Limits {
			if rs[i].Allowed {
				rs[i], _, _ = algo.Check(l, work[i].st, now, 0)
			}
			i++
		}
	}
}

// decision is the work of Take for one limit.
type decision struct {
	sh       *shard
	k0, k1   int    // the entry key, in Take's keys
	h        uint64 // its hash
	i        int32  // the stored entry's node, expired or not; 0 if none
	st, next algo.State
	ttl      int64
}

// read loads into d the state of its entry key, key, at now (none if it
// expired), makes the entry the most recently used of its shard, and
// converts it to l: state of another Limit is kept converted whatever the
// decision, as the Lua scripts keep it.
func (d *decision) read(key []byte, l sluice.Limit, now int64) {
	if d.i = d.sh.find(key, d.h); d.i != 0 {
		if e := d.sh.at(d.i); e.expires > now {
			d.st = d.sh.state(d.i)
		}
		d.sh.touch(d.i)
	}
	if st, ttl, ok := algo.Convert(l, d.st, now); ok {
		d.st = st
		d.save(key, st, ttl, now)
	}
}

// save stores st for ttl µs from now as the state of d, whose entry key
// is key (deletes it when ttl <= 0).
func (d *decision) save(key []byte, st algo.State, ttl, now int64) {
	sh := d.sh
	if d.i == 0 || sh.at(d.i).key != string(key) {
		// No entry, or one that another limit of the request, with the
		// same key and identity against Request's rule, deleted.
		d.i = sh.find(key, d.h)
	}
	d.i = sh.put(d.i, key, d.h, &st, ttl, now)
}

// entryHash returns the hash of entry key k by which a shard finds it:
// the hash of its client key, which also picks its shard, mixed with the
// hash of the bytes before it (see appendEntryKey), so that TakeOne
// hashes a client key once, and a limit's prefix once for all the
// decisions of its shard under that limit (lastLimit).
func entryHash(seed maphash.Seed, k []byte) uint64 {
	pl := prefixLen(k)
	return mixHash(maphash.Bytes(seed, k[pl:]), maphash.Bytes(seed, k[:pl]))
}

// entryHashString is entryHash of a key held as a string.
func entryHashString(seed maphash.Seed, k string) uint64 {
	pl := prefixLen(k)
	return mixHash(maphash.String(seed, k[pl:]), maphash.String(seed, k[:pl]))
}

// mixHash returns the entry hash of a client key of hash c under a
// prefix of hash p. Its low 32 bits, a slot's tag and home, depend on all
// the bits of both (a shard's client keys share their low bits).
func mixHash(c, p uint64) uint64 {
	h := (c ^ p) * 0x9e3779b97f4a7c15
	return (h ^ h>>32) & hashMask
}

// prefixLen returns the length of the bytes of entry key k before its
// client key: the flags, the algorithm's name if it is unknown, the
// period and the name (see appendEntryKey).
func prefixLen[K string | []byte](k K) int {
	uvarint := func(i int) (uint64, int) { // the value at k[i:] and the index after it
		var v uint64
		for shift := 0; ; shift += 7 {
			c := k[i]
			i++
			v |= uint64(c&0x7f) << shift
			if c < 0x80 {
				return v, i
			}
		}
	}
	i := 1
	if k[0]&7 == 0 { // the algorithm's name
		n, j := uvarint(i)
		i = j + int(n)
	}
	_, i = uvarint(i)  // the period, a uvarint or a varint: the same bytes
	n, j := uvarint(i) // the name
	return j + int(n)
}

// hashMask is all ones but in tests that make hashes collide, to run the
// code for long probe sequences.
var hashMask = ^uint64(0)

// at returns node i.
func (sh *shard) at(i int32) *node {
	return &sh.chunks[i>>chunkBits][i&chunkMask]
}

// tableSize returns the number of slots for n entries: a power of two,
// at least 8, at most 3/4 full.
func tableSize(n int) int {
	size := 8
	for size*3/4 < n {
		size *= 2
	}
	return size
}

// slot is tab's slot for node i of an entry whose key's hash is h.
func slot(h uint64, i int32) uint64 { return uint64(uint32(h))<<32 | uint64(uint32(i)) }

// find returns the node of the entry key whose hash is h, or 0.
func (sh *shard) find(key []byte, h uint64) int32 { return sh.findSplit(key, "", h) }

// findSplit is find of the entry key pre followed by ck, without
// building it.
func (sh *shard) findSplit(pre []byte, ck string, h uint64) int32 {
	mask := uint32(len(sh.tab) - 1)
	tag := uint32(h)
	for p := tag & mask; ; p = (p + 1) & mask {
		s := sh.tab[p]
		if s == 0 {
			return 0
		}
		if uint32(s>>32) == tag {
			i := int32(uint32(s))
			if k := sh.at(i).key; len(k) == len(pre)+len(ck) && k[:len(pre)] == string(pre) && k[len(pre):] == ck {
				return i
			}
		}
	}
}

// place puts s in the first empty slot of its probe sequence.
func (sh *shard) place(s uint64) {
	mask := uint32(len(sh.tab) - 1)
	p := uint32(s>>32) & mask
	for sh.tab[p] != 0 {
		p = (p + 1) & mask
	}
	sh.tab[p] = s
}

// insert adds a node for key, whose hash is h and which has none, as the
// most recently used, and returns it.
func (sh *shard) insert(key string, h uint64) int32 {
	i := sh.free
	switch {
	case i != 0:
		sh.free = sh.at(i).next
	case sh.used < chunkSize:
		i = sh.used
		sh.chunks[0] = append(sh.chunks[0], node{})
	default:
		i = sh.used
		if int(i>>chunkBits) == len(sh.chunks) {
			sh.chunks = append(sh.chunks, make([]node, chunkSize))
		}
	}
	if i == sh.used {
		sh.used++
	}
	*sh.at(i) = node{key: key}
	if (sh.n+1)*4 > len(sh.tab)*3 {
		old := sh.tab
		sh.tab = make([]uint64, 2*len(old))
		for _, s := range old {
			if s != 0 {
				sh.place(s)
			}
		}
	}
	sh.place(slot(h, i))
	sh.pushFront(i)
	sh.n++
	sh.peak = max(sh.peak, sh.n)
	return i
}

// remove deletes node i and frees it.
func (sh *shard) remove(i int32) {
	n := sh.at(i)
	mask := uint32(len(sh.tab) - 1)
	want := slot(entryHashString(sh.seed, n.key), i)
	p := uint32(want>>32) & mask
	for sh.tab[p] != want {
		p = (p + 1) & mask
	}
	// Close the hole at p: move back every later slot of the run whose
	// home is not between the hole and it (Knuth's algorithm R).
	for q := (p + 1) & mask; sh.tab[q] != 0; q = (q + 1) & mask {
		home := uint32(sh.tab[q]>>32) & mask
		if p <= q && p < home && home <= q || p > q && (p < home || home <= q) {
			continue // still reachable from its home
		}
		sh.tab[p] = sh.tab[q]
		p = q
	}
	sh.tab[p] = 0
	sh.at(n.prev).next = n.next
	sh.at(n.next).prev = n.prev
	if logged(n.key) {
		delete(sh.logs, i)
	}
	*n = node{next: sh.free}
	sh.free = i
	sh.n--
}

// touch makes node i the most recently used.
func (sh *shard) touch(i int32) {
	head := &sh.chunks[0][0]
	first := head.next
	if first == i {
		return
	}
	n := sh.at(i)
	prev, next := n.prev, n.next // prev != 0: i is not first
	sh.at(prev).next = next
	sh.at(next).prev = prev
	n.prev, n.next = 0, first
	sh.at(first).prev = i
	head.next = i
}

// pushFront links node i, unlinked, as the most recently used.
func (sh *shard) pushFront(i int32) {
	head := sh.at(0)
	n := sh.at(i)
	n.prev, n.next = 0, head.next
	sh.at(head.next).prev = i
	head.next = i
}

// evict deletes the entries expired for over evictGrace among up to n
// entries at the end of the least-recently-used list, and among up to n
// others, from a random place in the table (looking at no more than 4n
// slots, and at none twice).
func (sh *shard) evict(now int64, n int) int {
	deleted := 0
	for range n {
		i := sh.at(0).prev
		if i == 0 || sh.at(i).expires > now-evictGrace {
			break
		}
		sh.remove(i)
		deleted++
	}
	mask := uint32(len(sh.tab) - 1)
	p := rand.Uint32()
	for range min(4*n, len(sh.tab)) { // each slot once at most
		if n == 0 {
			break
		}
		p = (p + 1) & mask
		if s := sh.tab[p]; s != 0 {
			n--
			if i := int32(uint32(s)); sh.at(i).expires <= now-evictGrace {
				sh.remove(i) // may move a later slot back to p: looked at next time
				deleted++
			}
		}
	}
	return deleted
}

// sweep deletes every entry expired for over evictGrace.
func (sh *shard) sweep(now int64) int {
	deleted := 0
	for i := sh.at(0).prev; i != 0; {
		n := sh.at(i)
		prev := n.prev
		if n.expires <= now-evictGrace {
			sh.remove(i)
			deleted++
		}
		i = prev
	}
	return deleted
}

// shrink rebuilds the shard at its current size when it holds a quarter
// of its peak or less, keeping the order of use. Node indexes change.
func (sh *shard) shrink() {
	if sh.peak < shrinkMin || sh.n > sh.peak/4 {
		return
	}
	chunks, logs := sh.chunks, sh.logs
	old := func(i int32) *node { return &chunks[i>>chunkBits][i&chunkMask] }
	sh.init(sh.seed, sh.cap, sh.n)
	sh.logs = nil
	for i := old(0).prev; i != 0; i = old(i).prev {
		o := old(i)
		j := sh.insert(o.key, entryHashString(sh.seed, o.key))
		e := sh.at(j)
		prev, next := e.prev, e.next
		*e = *o
		e.prev, e.next = prev, next
		if logged(o.key) {
			sh.setLog(j, logs[i])
		}
	}
}

// Reset implements sluice.Store.
func (s *Store) Reset(_ context.Context, key string, limits ...sluice.Limit) error {
	ck := newClientKey(key)
	sh := s.shard(ck.key)
	var scratch [256]byte
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, l := range limits {
		k := appendEntryKey(scratch[:0], ck, l)
		if i := sh.find(k, entryHash(s.seed, k)); i != 0 {
			sh.remove(i)
		}
	}
	return nil
}

// TTL returns how long the state of key under l will live if nothing else
// happens, or 0 when there is none.
func (s *Store) TTL(_ context.Context, key string, l sluice.Limit) (time.Duration, error) {
	now := s.micros(time.Time{})
	ck := newClientKey(key)
	sh := s.shard(ck.key)
	var scratch [256]byte
	k := appendEntryKey(scratch[:0], ck, l)
	h := entryHash(s.seed, k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.find(k, h); i != 0 && sh.at(i).expires > now {
		return time.Duration(sh.at(i).expires-now) * time.Microsecond, nil
	}
	return 0, nil
}

// Len returns the number of entries held, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Capacity returns the most entries the store holds after a decision
// (unless the decision has more entries in a shard than the shard holds:
// see WithCapacity): the capacity of WithCapacity (or DefaultCapacity)
// rounded up to a multiple of the number of shards.
func (s *Store) Capacity() int {
	return len(s.shards) * s.shards[0].cap
}

// Evictions returns the number of entries the store has forgotten because
// their shard was full (not counting expired state, which is no loss).
// Each may have made a client's counter start afresh.
func (s *Store) Evictions() uint64 {
	var n uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.evictions
		sh.mu.Unlock()
	}
	return n
}

// Sweep deletes every piece of state that has been expired for over a
// minute, rebuilds the shards that hold a quarter of their peak or less
// (so that their memory returns), and returns how many entries it deleted.
// Decisions do the same as they go; call Sweep periodically (SweepEvery)
// to return memory after traffic stops.
func (s *Store) Sweep() int {
	now := s.micros(time.Time{})
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.sweep(now)
		sh.shrink()
		sh.mu.Unlock()
	}
	return n
}

// SweepEvery calls Sweep every interval until ctx is done; run it in a
// goroutine of its own. A process that may go idle after a flood of keys
// runs it so that the flood's memory returns without further traffic. An
// interval below a second is a second.
func (s *Store) SweepEvery(ctx context.Context, interval time.Duration) {
	interval = max(interval, time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep()
		}
	}
}
