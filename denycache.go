package sluice

import (
	"hash/maphash"
	"sync"
	"time"
)

// WithDenyCache makes the Limiter answer, in process and without asking
// the store, a request that the store denied a moment ago and must still
// deny: a client hammering a key over its limit then costs the store one
// decision per RetryAfter instead of one per request. At most entries
// denials are kept (0 or less: DefaultDenyCacheEntries).
//
// It is exact. A request of cost 1 by one key under one limit (a policy
// rule of one limit), denied at t0 with RetryAfter r, is denied by the
// store until t0+r whatever other replicas do: they can only spend more,
// which makes the wait longer, never shorter. So until t0+r, taking t0 as
// the instant before the store was asked (never later than the decision
// itself), the same request is answered from the cache: denied, with the
// store's Limit, a Remaining of 0, the RetryAfter left until t0+r and the
// ResetAfter left of the store's. Those are what the store would answer
// if nothing else happened; another replica's spending can only lengthen
// both waits. A changed limit (a reload that raises it) is another limit
// and asks the store; Limiter.Reset forgets the key's cached denials. A
// Reset made by another process is not seen here until the denials it
// cleared expire, at the latest RetryAfter after they were cached.
//
// Requests of another cost, of several limits or parts, and Degraded
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
// default: a few MiB at most.
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
	mu sync.Mutex
	m  map[denyKey]denial
}

// denyKey is a key under one limit, its numbers included: a reload that
// changes them asks the store afresh.
type denyKey struct {
	key   string
	limit Limit
}

// denial is a cached denial: the store's Result at t0, and until when it
// holds.
type denial struct {
	res       Result
	t0, until time.Time
}

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

// cacheable tells whether parts is a request the cache knows about.
func cacheable(parts []Part) bool {
	return len(parts) == 1 && len(parts[0].Limits) == 1 && parts[0].Cost == 1
}

// answer returns the cached answer to p at now, if a denial holds.
func (c *denyCache) answer(p Part, now time.Time) (Result, bool) {
	k := denyKey{p.Key, p.Limits[0]}
	s := c.shard(p.Key)
	s.mu.Lock()
	d, ok := s.m[k]
	if ok && !now.Before(d.until) {
		delete(s.m, k)
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		return Result{}, false
	}
	r := d.res
	r.Remaining = 0
	r.RetryAfter = d.until.Sub(now)
	r.ResetAfter = max(r.ResetAfter-now.Sub(d.t0), r.RetryAfter)
	return r, true
}

// keep caches r, the store's answer at t0 to p, if it is an exact denial.
func (c *denyCache) keep(p Part, r Result, t0 time.Time) {
	if r.Allowed || r.Degraded != NotDegraded || r.RetryAfter <= 0 {
		return
	}
	s := c.shard(p.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= c.max {
		for k, d := range s.m {
			if !t0.Before(d.until) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= c.max {
			return // full of denials that still hold
		}
	}
	s.m[denyKey{p.Key, p.Limits[0]}] = denial{res: r, t0: t0, until: t0.Add(r.RetryAfter)}
}

// forget drops the cached denials of key under limits.
func (c *denyCache) forget(key string, limits []Limit) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range limits {
		delete(s.m, denyKey{key, l})
	}
}
