package lease

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// DefaultBlock is the block New leases without a Block option: 10 units,
// so that backing-store calls per decision fall about tenfold while the
// fleet's overshoot stays at most 10 × replicas.
const DefaultBlock = 10

// DefaultMaxLeases is the most leases a Store holds without a MaxLeases
// option: 1<<16, about 24 MB at the 360 bytes a lease takes with a key of
// 16 bytes (BenchmarkLeaseMemory), far more keys than are hot at once.
const DefaultMaxLeases = 1 << 16

// maxShards is the number of independently locked shards of a Store's
// leases (fewer when MaxLeases is smaller).
const maxShards = 16

// evictScan is how many leases a full shard looks at for one to evict.
const evictScan = 32

// Option configures a Store.
type Option func(*config)

type config struct {
	block     int
	blocks    func(sluice.Limit) int // per limit (BlockFor); nil: block for every limit of minCap
	maxAge    time.Duration
	maxLeases int
	minCap    int // 0: DefaultMinCapacityBlocks × block
}

// Block sets B, the units taken from the backing store at once (default
// DefaultBlock, at least 1). The fleet's overshoot bound is B × replicas;
// B is clamped to each limit's Capacity.
func Block(n int) Option { return func(c *config) { c.block = n } }

// BlockFor makes B a limit's own: f returns the block of each limit, 0
// for a limit not leased (its requests go to the backing store), and
// replaces Block and MinCapacity. f is called for every decision of one
// part and one limit: it must be quick and safe for concurrent use, and
// may change its answers over time (a reloaded policy file's lease
// settings). A policy file's lease sections use it.
func BlockFor(f func(sluice.Limit) int) Option { return func(c *config) { c.blocks = f } }

// MaxAge caps how long a lease lives after it was taken, below what the
// backing state allows (0, the default: no cap beyond the backing state).
func MaxAge(d time.Duration) Option { return func(c *config) { c.maxAge = d } }

// MinCapacity leases only limits whose Capacity is at least n (default
// DefaultMinCapacityBlocks × B); requests under smaller limits go to the
// backing store. Leasing a small limit hands most of it to one replica
// (a block of 10 of a limit of 12 leaves 2 for every other replica until
// the lease ends), so the default keeps a block at most a tenth of what it
// is taken from. MinCapacity(1) leases every limit.
func MinCapacity(n int) Option { return func(c *config) { c.minCap = n } }

// DefaultMinCapacityBlocks is the smallest Capacity leased, in blocks,
// without a MinCapacity option: 10, so that with block 10 limits from 100
// up are leased.
const DefaultMinCapacityBlocks = 10

// MaxLeases caps the leases a Store holds (default DefaultMaxLeases, at
// least 1). The leases are kept in up to 16 shards of MaxLeases/16 each, so
// a Store may evict before it holds MaxLeases when keys hash unevenly.
func MaxLeases(n int) Option { return func(c *config) { c.maxLeases = n } }

// Store is a sluice.Store that answers one-part, one-limit requests from
// blocks of quota leased from a backing store (see the package
// documentation for the semantics and the overshoot bound). Create it with
// New.
type Store struct {
	backing sluice.Store
	settles atomic.Bool // backing does TakeAt (until it says errors.ErrUnsupported): give-backs
	blocks  func(sluice.Limit) int
	block   int
	minCap  int
	maxAge  time.Duration
	seed    maphash.Seed
	shards  []shard
	perCap  int

	outlive   time.Duration // test hook: leases end this much later than allowed
	keepRests bool          // test hook: nothing is given back (as without a Settler)
}

type shard struct {
	mu sync.Mutex
	m  map[leaseKey]*entry
	// last is the latest Now of a request of the shard's keys on the
	// caller's clock: the instant a lease on that clock is given back at
	// when no request gives one (Release, eviction by the other clock).
	last time.Time
}

type leaseKey struct {
	key string
	id  sluice.Limit // Limit.Identity()
}

// entry is one key's lease on one replica. Every field is guarded by its
// shard's mutex.
type entry struct {
	units  int           // left to spend
	start  time.Time     // t0: read before the block's Take was sent
	end    time.Time     // the lease is usable in [start, end)
	reset  time.Duration // the block's ResetAfter, from start
	own    bool          // start and end are on this process's clock, not the caller's
	at     time.Time     // the backing store's instant of the block's take (zero: no Settler)
	limit  int           // the block's Limit: with the key's identity, the limit to give back to
	burst  int           // and its Burst
	refill *flight       // non-nil while a refill is in flight
	dead   bool          // removed by Reset, eviction or Release: a refill must not install
	short  bool          // the last refill found no block: ask for the cost alone
}

// New returns a Store leasing blocks of quota from backing. It returns an
// error naming the option when Block, MaxAge or MaxLeases is out of range
// or backing is nil. Over a backing store that settles (its TakeAt and
// Refund do not fail with errors.ErrUnsupported) the Store gives unspent
// units back (see the package documentation).
func New(backing sluice.Store, opts ...Option) (*Store, error) {
	if backing == nil {
		return nil, fmt.Errorf("lease: the backing store is nil")
	}
	c := config{block: DefaultBlock, maxLeases: DefaultMaxLeases}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case c.block < 1:
		return nil, fmt.Errorf("lease: Block must be at least 1, got %d", c.block)
	case c.maxAge < 0:
		return nil, fmt.Errorf("lease: MaxAge must not be negative, got %s", c.maxAge)
	case c.maxLeases < 1:
		return nil, fmt.Errorf("lease: MaxLeases must be at least 1, got %d", c.maxLeases)
	case c.minCap < 0:
		return nil, fmt.Errorf("lease: MinCapacity must not be negative, got %d", c.minCap)
	}
	if c.minCap == 0 {
		c.minCap = DefaultMinCapacityBlocks * c.block
	}
	n := min(maxShards, c.maxLeases)
	s := &Store{
		backing: backing,
		blocks:  c.blocks,
		block:   c.block,
		minCap:  c.minCap,
		maxAge:  c.maxAge,
		seed:    maphash.MakeSeed(),
		shards:  make([]shard, n),
		perCap:  c.maxLeases / n,
	}
	for i := range s.shards {
		s.shards[i].m = make(map[leaseKey]*entry)
	}
	s.settles.Store(true)
	return s, nil
}

// Backing returns the store s leases from.
func (s *Store) Backing() sluice.Store { return s.backing }

// Len returns the number of leases s holds (spent or ended ones included
// until they are evicted or refilled).
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

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
}

// leasable reports whether req is decided from a lease: one part, one
// limit that is leased, cost from 1 to its block.
func (s *Store) leasable(req sluice.Request) bool {
	if len(req.Parts) != 1 {
		return false
	}
	p := req.Parts[0]
	return len(p.Limits) == 1 && p.Cost >= 1 && s.leases(p.Limits[0]) && p.Cost <= s.blockFor(p.Limits[0])
}

// leases reports whether l is leased: a block of its own (BlockFor), or a
// Capacity of at least minCap.
func (s *Store) leases(l sluice.Limit) bool {
	if l.Algorithm == sluice.Concurrency {
		return false // a slot is held until released: nothing to lease ahead
	}
	if s.blocks != nil {
		return s.blocks(l) >= 1
	}
	return l.Capacity() >= s.minCap
}

// blockFor returns l's block, clamped to its Capacity.
func (s *Store) blockFor(l sluice.Limit) int {
	if s.blocks != nil {
		return min(s.blocks(l), l.Capacity())
	}
	return min(s.block, l.Capacity())
}

// Take decides req: from the replica's lease for its key when req is
// leasable (see the package documentation), otherwise by the backing
// store.
func (s *Store) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	if !s.leasable(req) {
		return s.backing.Take(ctx, req)
	}
	rs, _, err := s.decide(ctx, req)
	return rs, err
}

// decide is Take of a leasable req. It also returns the instant the
// backing store consumed the units the request spent at: its lease's block
// take, or its own take (zero when the backing store is no Settler).
func (s *Store) decide(ctx context.Context, req sluice.Request) ([]sluice.Result, time.Time, error) {
	p := req.Parts[0]
	lim := p.Limits[0]
	k := leaseKey{key: p.Key, id: lim.Identity()}
	own := req.Now.IsZero()
	sh := s.shard(p.Key)
	for {
		sh.mu.Lock()
		now := sh.now(req)
		e := sh.m[k]
		if e != nil && e.refill != nil {
			f := e.refill
			f.waiters++
			sh.mu.Unlock()
			select {
			case <-f.done:
				if f.err != nil {
					// The store failed the refill this request waited
					// for: it fails too, rather than each waiter asking
					// a failing store in turn.
					return nil, time.Time{}, fmt.Errorf("lease: the refill of %q this request waited for: %w", p.Key, f.err)
				}
				continue
			case <-ctx.Done():
				return nil, time.Time{}, fmt.Errorf("lease: waiting for the lease of %q: %w", p.Key, ctx.Err())
			}
		}
		if e != nil && e.usable(now, own, p.Cost) {
			e.units -= p.Cost
			r := e.result(now, lim)
			at := e.at
			sh.mu.Unlock()
			return []sluice.Result{r}, at, nil
		}
		var back []rest // given back before the refill
		if e == nil {
			var evicted rest
			e, evicted = sh.add(k, now, own, s.perCap)
			if evicted.units > 0 {
				back = append(back, evicted)
			}
			if e == nil {
				// Every lease of the shard is being refilled.
				sh.mu.Unlock()
				return s.takeAt(ctx, req)
			}
		}
		keep, r := s.leftover(sh, k, e, req, now)
		if r.units > 0 {
			back = append(back, r)
		}
		e.units = 0
		f := &flight{done: make(chan struct{})}
		e.refill = f
		short := e.short
		sh.mu.Unlock()

		if back != nil {
			// A give-back that fails loses its units, as without a
			// Settler: the request is not failed for it.
			_ = s.giveBack(ctx, back)
		}
		rs, got, short, err := s.refill(ctx, req, now, keep, short)

		sh.mu.Lock()
		e.refill = nil
		if err != nil && ctx.Err() == nil {
			// Not this caller's own cancellation: the store's failure.
			f.err = err
		}
		close(f.done)
		e.short = short
		if got != nil && !e.dead {
			e.install(got, own, lim)
		}
		sh.mu.Unlock()
		if err != nil {
			return nil, time.Time{}, err
		}
		return rs.results, rs.at, nil
	}
}

// now returns the instant of req on the clock its lease would be on: its
// Now, which becomes the shard's last if later, or this process's
// monotonic clock when it has none. sh.mu is held: this replica's decision
// instants for a key are in lock order, and none precedes its lease's
// start.
func (sh *shard) now(req sluice.Request) time.Time {
	if req.Now.IsZero() {
		return time.Now()
	}
	if req.Now.After(sh.last) {
		sh.last = req.Now
	}
	return req.Now
}

// usable reports whether e answers a request of cost at now.
func (e *entry) usable(now time.Time, own bool, cost int) bool {
	return e.own == own && e.units >= cost && !now.Before(e.start) && now.Before(e.end)
}

// result is the Result of a request just spent from e at now.
func (e *entry) result(now time.Time, lim sluice.Limit) sluice.Result {
	return sluice.Result{
		Allowed:    true,
		Limit:      lim.Capacity(),
		Remaining:  e.units,
		ResetAfter: max(e.reset-now.Sub(e.start), 0),
	}
}

// expired reports whether e can answer nothing more at now: spent or
// ended (a lease on the other clock counts as ended).
func (e *entry) expired(now time.Time, own bool) bool {
	return e.units == 0 || e.own != own || !now.Before(e.end)
}

// add inserts an empty entry for k, evicting one when the shard holds
// limit entries: an expired one among the first evictScan looked at, or
// else the first of them not being refilled. It returns nil when there is
// no room, and what the evicted lease has to give back. sh.mu is held.
func (sh *shard) add(k leaseKey, now time.Time, own bool, limit int) (*entry, rest) {
	var evicted rest
	if len(sh.m) >= limit {
		var victim *leaseKey
		seen := 0
		for vk, v := range sh.m {
			if v.refill != nil {
				continue
			}
			if victim == nil || v.expired(now, own) {
				victim = &vk
				if v.expired(now, own) {
					break
				}
			}
			if seen++; seen >= evictScan {
				break
			}
		}
		if victim == nil {
			return nil, rest{}
		}
		v := sh.m[*victim]
		var callerNow time.Time
		if !own {
			callerNow = now
		}
		evicted = sh.rest(*victim, v, callerNow)
		v.dead, v.units = true, 0
		delete(sh.m, *victim)
	}
	e := &entry{}
	sh.m[k] = e
	return e, evicted
}

// Reset drops this replica's leases for key under each of limits and
// resets the backing store. Other replicas' leases are theirs to drop.
// The leases' units are not given back: the reset gives back everything.
func (s *Store) Reset(ctx context.Context, key string, limits ...sluice.Limit) error {
	s.drop(key, limits)
	if err := s.backing.Reset(ctx, key, limits...); err != nil {
		return fmt.Errorf("lease: reset %q: %w", key, err)
	}
	// Again: a lease refilled from the old state while the store was reset.
	s.drop(key, limits)
	return nil
}

func (s *Store) drop(key string, limits []sluice.Limit) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, l := range limits {
		k := leaseKey{key: key, id: l.Identity()}
		if e := sh.m[k]; e != nil {
			e.dead = true
			e.units = 0
			delete(sh.m, k)
		}
	}
}

// Node implements sluice.Noder: the backing store's node of key (0 if it
// is no Noder), so that a Limiter over a Store keeps one breaker per node
// of the backing store.
func (s *Store) Node(key string) int {
	if n, ok := s.backing.(sluice.Noder); ok {
		return n.Node(key)
	}
	return 0
}

// NodeName implements sluice.Noder: the backing store's name of node.
func (s *Store) NodeName(node int) string {
	if n, ok := s.backing.(sluice.Noder); ok {
		return n.NodeName(node)
	}
	return ""
}
