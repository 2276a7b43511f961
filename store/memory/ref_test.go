// Code copied from 507cf45:store/memory/memory.go (the unbounded store, a map per shard), renamed, as the reference of TestMatchesUnboundedStore.

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

// refStore is an in-process sluice.Store. Create it with refNew; the zero value is
// not usable.
type refStore struct {
	shards []refshard
	seed   maphash.Seed
	now    func() time.Time
}

// refshard is one independently locked part of the map, padded so that two
// shards never share a cache line.
type refshard struct {
	mu  sync.Mutex
	m   map[refentryKey]*refentry
	ops uint64 // decisions, to space out eviction
	_   [40]byte
}

// refentryKey identifies one piece of state: a client key under a limit's
// Identity (name, algorithm and period: algo.ID's identity, without
// building a string), so that a limit whose Limit or Burst changes keeps
// its state. The client key is bounded (longkey.Bound); hashed tells a
// long key's hash from a short key that happens to equal it.
type refentryKey struct {
	key    string
	hashed bool
	limit  sluice.Limit
}

// refclientKey is a client key as the store keeps it: bounded, and whether
// that made it a hash.
type refclientKey struct {
	key    string
	hashed bool
}

func refnewClientKey(key string) refclientKey {
	return refclientKey{longkey.Bound(key), longkey.Hashed(key)}
}

// under returns the refentryKey of k's state under l.
func (k refclientKey) under(l sluice.Limit) refentryKey {
	return refentryKey{k.key, k.hashed, l.Identity()}
}

type refentry struct {
	st      algo.State
	expires int64 // µs; the state is gone at and after this instant
}

// Every refevictEvery-th refdecision in a refshard inspects refevictSample entries of
// it, beyond the ones it touches, and deletes those expired for over
// refevictGrace: two per refdecision on average, which keeps such entries below
// about half of the refshard under any steady load, without starting a map
// iteration on every refdecision.
const (
	refevictEvery  = 8
	refevictSample = 2 * refevictEvery
	refevictGrace  = int64(time.Minute / time.Microsecond) // how long expired state is kept
)

// refOption configures a refStore.
type refOption func(*refStore)

// refWithClock sets the clock used when a request carries no time, and for
// expiry (TTL and Sweep). The default is time.Now.
func refWithClock(now func() time.Time) refOption {
	return func(s *refStore) { s.now = now }
}

// refWithShards sets the number of independently locked shards (rounded up to
// a power of two; default 256).
func refWithShards(n int) refOption {
	return func(s *refStore) {
		p := 1
		for p < n {
			p *= 2
		}
		s.shards = make([]refshard, p)
	}
}

// refNew returns an empty refStore.
func refNew(opts ...refOption) *refStore {
	s := &refStore{seed: maphash.MakeSeed(), now: time.Now}
	for _, o := range opts {
		o(s)
	}
	if s.shards == nil {
		s.shards = make([]refshard, 256)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[refentryKey]*refentry)
	}
	return s
}

func (s *refStore) refshard(key string) *refshard {
	return &s.shards[s.shardIndex(key)]
}

func (s *refStore) shardIndex(key string) int {
	return int(maphash.String(s.seed, key) & uint64(len(s.shards)-1))
}

func (s *refStore) micros(t time.Time) int64 {
	if t.IsZero() {
		t = s.now()
	}
	return t.UnixMicro()
}

// Take implements sluice.Store. A request of several parts locks the
// shards of all their keys, in refshard order, so it is atomic too.
func (s *refStore) Take(_ context.Context, req sluice.Request) ([]sluice.Result, error) {
	now := s.micros(req.Now)
	n := req.Len()
	rs := make([]sluice.Result, n)
	var buf [4]refdecision // most decisions have a limit or two: no allocation
	var work []refdecision
	if n <= len(buf) {
		work = buf[:n]
	} else {
		work = make([]refdecision, n)
	}
	var shards [4]int // most decisions lock a refshard or two: no allocation
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
				// refdecision, as the Lua scripts keep it.
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
			if sh.ops++; sh.ops%refevictEvery == 0 {
				sh.evict(now, refevictSample)
			}
		}
	}
	return rs, nil
}

// lock fills in the refshard and refentry key of every limit of parts in work,
// locks the shards they live in, each once and in refshard order (so that
// two requests never wait for each other in a cycle), and returns their
// indexes, appended to idx, for unlock.
func (s *refStore) lock(parts []sluice.Part, work []refdecision, idx []int) []int {
	i := 0
	for _, p := range parts {
		ck := refnewClientKey(p.Key)
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
func (s *refStore) unlock(idx []int) {
	for _, x := range idx {
		s.shards[x].mu.Unlock()
	}
}

// refdecision is the work of Take for one limit.
type refdecision struct {
	sh       *refshard
	key      refentryKey
	e        *refentry // the stored refentry, expired or not; nil if none
	st, next algo.State
	ttl      int64
}

// save stores st for ttl µs from now as the state of d (deletes it when
// ttl <= 0).
func (d *refdecision) save(st algo.State, ttl, now int64) {
	switch {
	case ttl <= 0:
		delete(d.sh.m, d.key)
		d.e = nil
	case d.e != nil:
		d.e.st, d.e.expires = st, now+ttl
	default:
		d.e = &refentry{st: st, expires: now + ttl}
		d.sh.m[d.key] = d.e
	}
}

// evict deletes the entries expired for over refevictGrace among up to n
// entries of the refshard. Map iteration starts at a random place, so this
// samples the refshard.
func (sh *refshard) evict(now int64, n int) int {
	deleted := 0
	for k, e := range sh.m {
		if n == 0 {
			break
		}
		n--
		if e.expires <= now-refevictGrace {
			delete(sh.m, k)
			deleted++
		}
	}
	return deleted
}

// Reset implements sluice.Store.
func (s *refStore) Reset(_ context.Context, key string, limits ...sluice.Limit) error {
	ck := refnewClientKey(key)
	sh := s.refshard(ck.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, l := range limits {
		delete(sh.m, ck.under(l))
	}
	return nil
}

// TTL returns how long the state of key under l will live if nothing else
// happens, or 0 when there is none.
func (s *refStore) TTL(_ context.Context, key string, l sluice.Limit) (time.Duration, error) {
	now := s.micros(time.Time{})
	ck := refnewClientKey(key)
	sh := s.refshard(ck.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[ck.under(l)]; e != nil && e.expires > now {
		return time.Duration(e.expires-now) * time.Microsecond, nil
	}
	return 0, nil
}

// Len returns the number of pieces of state held, expired or not.
func (s *refStore) Len() int {
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
func (s *refStore) Sweep() int {
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
