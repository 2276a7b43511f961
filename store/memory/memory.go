// Package memory is a sluice.Store that keeps its state in the process: the
// store for a single replica, for tests, and the local fallback of a Limiter
// whose Redis store fails.
//
// A limit enforced by this store holds per process: behind a load balancer
// with N replicas each replica counts alone, and clients get up to N × limit.
// Use the Redis store (package store/redis) when more than one process
// serves the traffic.
//
// The store is safe for concurrent use. Its map is split into shards locked
// independently; all limits of one key live in one shard, so a multi-limit
// decision is atomic. Every piece of state carries the shortest sufficient
// lifetime (until it would be equivalent to no state at all), and state
// that has been expired for over a minute is evicted as the store is used,
// so idle keys do not accumulate. The minute of grace keeps a clock that
// steps back by less than that from handing out anything new: the state it
// steps back into is still there, whichever entries eviction happened to
// sample. It costs memory: the store holds every key that was active in
// the last minute plus its state's lifetime (a flood of new keys, one per
// client address, holds a minute of them). A client key longer than 128
// bytes is kept as a fixed-length hash of itself, as the Redis store keeps
// it, so that huge keys cannot bloat the store.
package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/longkey"
)

// Store is an in-process sluice.Store. Create it with New; the zero value is
// not usable.
type Store struct {
	shards []shard
	seed   maphash.Seed
	now    func() time.Time
}

// shard is one independently locked part of the map, padded so that two
// shards never share a cache line.
type shard struct {
	mu  sync.Mutex
	m   map[entryKey]*entry
	ops uint64 // decisions, to space out eviction
	_   [40]byte
}

// entryKey identifies one piece of state: a client key under a limit's
// Identity (name, algorithm and period: algo.ID's identity, without
// building a string), so that a limit whose Limit or Burst changes keeps
// its state. The client key is bounded (longkey.Bound); hashed tells a
// long key's hash from a short key that happens to equal it.
type entryKey struct {
	key    string
	hashed bool
	limit  sluice.Limit
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

// under returns the entryKey of k's state under l.
func (k clientKey) under(l sluice.Limit) entryKey {
	return entryKey{k.key, k.hashed, l.Identity()}
}

type entry struct {
	st      algo.State
	expires int64 // µs; the state is gone at and after this instant
}

// Every evictEvery-th decision in a shard inspects evictSample entries of
// it, beyond the ones it touches, and deletes those expired for over
// evictGrace: two per decision on average, which keeps such entries below
// about half of the shard under any steady load, without starting a map
// iteration on every decision.
const (
	evictEvery  = 8
	evictSample = 2 * evictEvery
	evictGrace  = int64(time.Minute / time.Microsecond) // how long expired state is kept
)

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock used when a request carries no time, and for
// expiry (TTL and Sweep). The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithShards sets the number of independently locked shards (rounded up to
// a power of two; default 256).
func WithShards(n int) Option {
	return func(s *Store) {
		p := 1
		for p < n {
			p *= 2
		}
		s.shards = make([]shard, p)
	}
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), now: time.Now}
	for _, o := range opts {
		o(s)
	}
	if s.shards == nil {
		s.shards = make([]shard, 256)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[entryKey]*entry)
	}
	return s
}

func (s *Store) shard(key string) *shard {
	return &s.shards[s.shardIndex(key)]
}

func (s *Store) shardIndex(key string) int {
	return int(maphash.String(s.seed, key) & uint64(len(s.shards)-1))
}

func (s *Store) micros(t time.Time) int64 {
	if t.IsZero() {
		t = s.now()
	}
	return t.UnixMicro()
}

// Take implements sluice.Store. A request of several parts locks the
// shards of all their keys, in shard order, so it is atomic too.
func (s *Store) Take(_ context.Context, req sluice.Request) ([]sluice.Result, error) {
	now := s.micros(req.Now)
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
	locked := s.lock(req.Parts, work, shards[:0])
	defer s.unlock(locked)

	allowed := true
	i := 0
	for _, p := range req.Parts {
		for _, l := range p.Limits {
			d := &work[i]
			if d.e = d.sh.m[d.key]; d.e != nil && d.e.expires > now {
				d.st = d.e.st
			}
			if st, ttl, ok := algo.Convert(l, d.st, now); ok {
				// State of another Limit: kept converted whatever the
				// decision, as the Lua scripts keep it.
				d.st = st
				d.save(st, ttl, now)
			}
			rs[i], d.next, d.ttl = algo.Check(l, d.st, now, int64(p.Cost))
			allowed = allowed && rs[i].Allowed
			i++
		}
	}
	if allowed {
		for i := range work {
			d := &work[i]
			d.save(d.next, d.ttl, now)
		}
	} else {
		// Nothing is consumed: the limits that would have admitted the
		// request report their state as it is.
		i := 0
		for _, p := range req.Parts {
			for _, l := range p.Limits {
				if rs[i].Allowed {
					rs[i], _, _ = algo.Check(l, work[i].st, now, 0)
				}
				i++
			}
		}
	}
	for i := range work {
		if sh := work[i].sh; i == 0 || sh != work[i-1].sh {
			if sh.ops++; sh.ops%evictEvery == 0 {
				sh.evict(now, evictSample)
			}
		}
	}
	return rs, nil
}

// lock fills in the shard and entry key of every limit of parts in work,
// locks the shards they live in, each once and in shard order (so that
// two requests never wait for each other in a cycle), and returns their
// indexes, appended to idx, for unlock.
func (s *Store) lock(parts []sluice.Part, work []decision, idx []int) []int {
	i := 0
	for _, p := range parts {
		ck := newClientKey(p.Key)
		x := s.shardIndex(ck.key)
		if !slices.Contains(idx, x) {
			idx = append(idx, x)
		}
		for _, l := range p.Limits {
			work[i].key, work[i].sh = ck.under(l), &s.shards[x]
			i++
		}
	}
	slices.Sort(idx)
	for _, x := range idx {
		s.shards[x].mu.Lock()
	}
	return idx
}

// unlock unlocks the shards lock locked.
func (s *Store) unlock(idx []int) {
	for _, x := range idx {
		s.shards[x].mu.Unlock()
	}
}

// decision is the work of Take for one limit.
type decision struct {
	sh       *shard
	key      entryKey
	e        *entry // the stored entry, expired or not; nil if none
	st, next algo.State
	ttl      int64
}

// save stores st for ttl µs from now as the state of d (deletes it when
// ttl <= 0).
func (d *decision) save(st algo.State, ttl, now int64) {
	switch {
	case ttl <= 0:
		delete(d.sh.m, d.key)
		d.e = nil
	case d.e != nil:
		d.e.st, d.e.expires = st, now+ttl
	default:
		d.e = &entry{st: st, expires: now + ttl}
		d.sh.m[d.key] = d.e
	}
}

// evict deletes the entries expired for over evictGrace among up to n
// entries of the shard. Map iteration starts at a random place, so this
// samples the shard.
func (sh *shard) evict(now int64, n int) int {
	deleted := 0
	for k, e := range sh.m {
		if n == 0 {
			break
		}
		n--
		if e.expires <= now-evictGrace {
			delete(sh.m, k)
			deleted++
		}
	}
	return deleted
}

// Reset implements sluice.Store.
func (s *Store) Reset(_ context.Context, key string, limits ...sluice.Limit) error {
	ck := newClientKey(key)
	sh := s.shard(ck.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, l := range limits {
		delete(sh.m, ck.under(l))
	}
	return nil
}

// TTL returns how long the state of key under l will live if nothing else
// happens, or 0 when there is none.
func (s *Store) TTL(_ context.Context, key string, l sluice.Limit) (time.Duration, error) {
	now := s.micros(time.Time{})
	ck := newClientKey(key)
	sh := s.shard(ck.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[ck.under(l)]; e != nil && e.expires > now {
		return time.Duration(e.expires-now) * time.Microsecond, nil
	}
	return 0, nil
}

// Len returns the number of pieces of state held, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Sweep deletes every piece of state that has been expired for over a
// minute and returns how many it deleted. Decisions evict such state as
// they go; call Sweep periodically only to return memory after traffic
// stops.
func (s *Store) Sweep() int {
	now := s.micros(time.Time{})
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.evict(now, len(sh.m))
		sh.mu.Unlock()
	}
	return n
}
