package sluice

import (
	"hash/maphash"
	"sync"
	"time"
)

// WithDenyCache makes the Limiter answer, in process and without asking
// the store, a request that the store denied a moment ago and must still
// deny: a client hammering a key over its limit then costs the store one
// decision per RetryAfter instead of one per request. About entries
// denials are kept (0 or less: DefaultDenyCacheEntries; rounded to a
// multiple of 64, at least 64).
//
// A request of cost 1 by one key under one limit (a policy rule of one
// limit), denied at t0 with RetryAfter r, is answered from the cache until
// t0+r (t0 taken before the store was asked, truncated to the microsecond
// as the stores decide): denied, with the store's Limit, a Remaining of 0,
// the RetryAfter left until t0+r and the ResetAfter left of the store's,
// which are what the store would answer if nothing else happened.
//
// That is exact, never denying what the store would admit, as long as
// nothing but spending touches the key's state, since spending by other
// replicas only lengthens the wait:
//
//   - every replica decides the key under the same Limit: while a rolling
//     reload raises a token_bucket or gcra limit, a replica already on the
//     higher limit drains the key's debt faster than the cached wait;
//   - the deciding clock is one and steady: the Redis server's (no
//     WithClock), not replicas' skewed clocks, which can open the next
//     window early for everyone;
//   - nothing gives back or drops state: not a Redis Cluster refunding a
//     request split over slots (several parts on several slots), not a
//     memory store evicting at capacity, not a Redis that lost its data,
//     and not a reset by another process, all of which are seen only when
//     the cached denials expire.
//
// Limiter.Reset forgets the key's cached denials under each limit's
// identity (Limit.Identity), including a denial decided while the reset
// ran. Requests of another cost, of several limits or parts, and Degraded
// answers are neither cached nor answered from the cache.
func WithDenyCache(entries int) Option {
	return func(l *Limiter) {
		if entries <= 0 {
			entries = DefaultDenyCacheEntries
		}
		l.deny = newDenyCache(entries)
	}
}

// DefaultDenyCacheEntries is how many denials WithDenyCache keeps by
// default: about 20 MiB at most with short keys (some 350 bytes each).
const DefaultDenyCacheEntries = 1 << 16

// denyShards spreads the cache over locks, so that keys hammered at once
// on several cores do not queue on one.
const denyShards = 64

// denyCache holds recent exact denials by key and limit.
type denyCache struct {
	seed   maphash.Seed
	max    int // entries per shard
	shards [denyShards]denyShard
}

type denyShard struct {
	mu     sync.Mutex
	m      map[denyKey]denial
	resets uint64 // Reset calls that touched the shard
}

// denyKey is a key under one limit's identity (Limit.Identity), as the
// stores keep its state.
type denyKey struct {
	key      string
	identity Limit
}

// denial is a cached denial: the limit it was decided under (its numbers
// included: a reload that changes them asks the store afresh), the
// store's Result at t0, and until when it holds.
type denial struct {
	limit     Limit
	res       Result
	t0, until time.Time
}

// evictScan bounds the entries a full shard looks at to make room, so
// that a shard full of live denials costs a new one little.
const evictScan = 32

func newDenyCache(entries int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), max: max(entries/denyShards, 1)}
	for i := range c.shards {
		c.shards[i].m = map[denyKey]denial{}
	}
	return c
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// cacheable tells whether parts is a request the cache knows about: not
// one of a Concurrency limit, whose denial ends when any slot is released,
// long before its RetryAfter.
func cacheable(parts []Part) bool {
	return len(parts) == 1 && len(parts[0].Limits) == 1 && parts[0].Cost == 1 && parts[0].Limits[0].Algorithm != Concurrency
}

// answer returns the cached answer at now to a request of cost 1 by key
// under limit, if a denial holds, and otherwise the shard's reset count,
// for keep.
func (c *denyCache) answer(key string, limit Limit, now time.Time) (Result, uint64, bool) {
	l := limit.Normalized()
	k := denyKey{key, l.Identity()}
	s := c.shard(key)
	s.mu.Lock()
	d, ok := s.m[k]
	if ok && (!now.Before(d.until) || d.limit != l) {
		delete(s.m, k)
		ok = false
	}
	resets := s.resets
	s.mu.Unlock()
	if !ok {
		return Result{}, resets, false
	}
	r := d.res
	r.Remaining = 0
	r.RetryAfter = d.until.Sub(now)
	r.ResetAfter = max(r.ResetAfter-now.Sub(d.t0), r.RetryAfter)
	return r, 0, true
}

// keep caches r, the store's answer at t0 to a request of cost 1 by key
// under limit, if it is an exact denial and no Reset touched the shard
// since answer counted resets.
func (c *denyCache) keep(key string, limit Limit, r Result, t0 time.Time, resets uint64) {
	if r.Allowed || r.Degraded != NotDegraded || r.RetryAfter <= 0 {
		return
	}
	l := limit.Normalized()
	// The stores decide at t0 in whole microseconds: RetryAfter counts
	// from there. (Add keeps the monotonic reading, Truncate would not.)
	t0 = t0.Add(-time.Duration(t0.Nanosecond() % 1000))
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resets != resets {
		return // a Reset ran meanwhile: the denial may be of the old state
	}
	if len(s.m) >= c.max {
		n := 0
		for k, d := range s.m {
			if !t0.Before(d.until) {
				delete(s.m, k)
			}
			if n++; n == evictScan {
				break
			}
		}
		if len(s.m) >= c.max {
			return // full of denials that still hold
		}
	}
	s.m[denyKey{key, l.Identity()}] = denial{limit: l, res: r, t0: t0, until: t0.Add(r.RetryAfter)}
}

// forget drops the cached denials of key under the identities of
// limits, and counts a reset on its shard.
func (c *denyCache) forget(key string, limits []Limit) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resets++
	for _, l := range limits {
		delete(s.m, denyKey{key, l.Normalized().Identity()})
	}
}
