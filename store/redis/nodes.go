package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// A Store is a sluice.Noder, so that a Limiter keeps one circuit breaker
// per Cluster master (see "Nodes" in the package doc). This file holds
// its map of slots to shards.

// ShardLister is an optional interface of a Client to a Redis Cluster: a
// Client that has it tells the Store which shard serves each slot, so
// that a Limiter keeps one circuit breaker per master (the Store's Node)
// and Ready checks every master. The rueidis adapter (FromRueidis) and
// package goredis's have it; without it a Store on a Cluster is one node,
// and Ready checks one master.
type ShardLister interface {
	// Shards returns the Cluster's shards: CLUSTER SHARDS, or CLUSTER
	// SLOTS on a server that does not have it (before Redis 7.0).
	Shards(ctx context.Context) ([]Shard, error)
}

// Shard is a master of a Redis Cluster, its replicas and the slots they
// serve, as ShardLister reports it.
type Shard struct {
	// Master is the address (host:port) of the master serving Slots.
	Master string
	// IDs are the Cluster node IDs of the master and its replicas: the
	// Store knows a shard again by them when a replica takes over.
	IDs []string
	// Slots are the ranges of hash slots of the shard, each its first and
	// last slot.
	Slots [][2]int
}

// Shard map refreshes: the map is read when the Store is made, every
// shardsRefresh while decisions come, and at most every shardsRetry
// while some fail (a failover, a slot moved), in the background.
const (
	shardsRefresh = 5 * time.Second
	shardsRetry   = 250 * time.Millisecond
	shardsTimeout = time.Second
)

// nodeMap is what a Cluster store knows of its shards: node n (from 1) is
// a shard, numbered when first seen and known again by its node IDs or its
// master; node 0 is the Cluster as a whole, whose slots are not mapped
// (before the first map, or a slot no shard serves).
type nodeMap struct {
	slot    [16384]uint16 // the node of each slot
	masters []string      // by node: its master's address; "" for node 0
	ids     [][]string    // by node: the IDs of its master and replicas

	readyOnce sync.Once
	readyTags []string // by node: a hash tag in a slot of its (ready.go)
}

// topology keeps a Cluster store's nodeMap up to date.
type topology struct {
	lister ShardLister
	m      atomic.Pointer[nodeMap]
	busy   atomic.Bool  // a background refresh is running
	last   atomic.Int64 // when the last refresh began, Unix ns
	mu     sync.Mutex   // one map is made at a time
}

// newTopology returns the topology of a Store on a Cluster whose client
// is a ShardLister, with its first refresh under way; nil otherwise.
func newTopology(s *Store) *topology {
	l, ok := s.client.(ShardLister)
	if s.split != bySlot || !ok {
		return nil
	}
	t := &topology{lister: l}
	t.kick()
	return t
}

// tick refreshes the map in the background when it is older than
// shardsRefresh: a Take calls it, so the map stays fresh while decisions
// come.
func (t *topology) tick() {
	if time.Since(time.Unix(0, t.last.Load())) >= shardsRefresh {
		t.kick()
	}
}

// kick refreshes the map in the background, unless a refresh is running
// or began less than shardsRetry ago: a failure on a node, which may be
// a failover or a slot moved, calls it.
func (t *topology) kick() {
	if time.Since(time.Unix(0, t.last.Load())) < shardsRetry || !t.busy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer t.busy.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), shardsTimeout)
		defer cancel()
		_ = t.refresh(ctx) // the map stays as it was; the next tick or kick tries again
	}()
}

// refresh reads the Cluster's shards now and maps them; on an error the
// map stays as it was.
func (t *topology) refresh(ctx context.Context) error {
	t.last.Store(time.Now().UnixNano())
	shards, err := t.lister.Shards(ctx)
	if err != nil {
		return fmt.Errorf("reading the Cluster's shards: %w", err)
	}
	if len(shards) == 0 {
		return errors.New("reading the Cluster's shards: none")
	}
	t.apply(shards)
	return nil
}

// apply maps shards, numbering them as the last map did: a shard that
// shares a node ID with a node of the last map (a replica promoted, a
// master back as a replica), or failing that its master, keeps its
// number; another gets the next one. Shards without slots serve no key
// and are left out.
func (t *topology) apply(shards []Shard) {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := &nodeMap{masters: []string{""}, ids: [][]string{nil}}
	if old := t.m.Load(); old != nil {
		next.masters, next.ids = slices.Clone(old.masters), slices.Clone(old.ids)
	}
	taken := make([]bool, len(next.masters))
	taken[0] = true
	for _, sh := range shards {
		if len(sh.Slots) == 0 {
			continue
		}
		n := next.match(sh, taken)
		if n < 0 {
			if len(next.masters) >= sluice.MaxNodes {
				continue // its slots stay node 0's
			}
			n = len(next.masters)
			next.masters, next.ids, taken = append(next.masters, ""), append(next.ids, nil), append(taken, false)
		}
		taken[n] = true
		next.masters[n], next.ids[n] = sh.Master, slices.Clone(sh.IDs)
		for _, r := range sh.Slots {
			for s := max(r[0], 0); s <= min(r[1], len(next.slot)-1); s++ {
				next.slot[s] = uint16(n)
			}
		}
	}
	t.m.Store(next)
}

// match returns the node of m, not taken yet, that sh is: one sharing a
// node ID with it, else one with its master; -1 if none.
func (m *nodeMap) match(sh Shard, taken []bool) int {
	for n, ids := range m.ids {
		if !taken[n] && slices.ContainsFunc(sh.IDs, func(id string) bool { return id != "" && slices.Contains(ids, id) }) {
			return n
		}
	}
	for n, master := range m.masters {
		if !taken[n] && master == sh.Master {
			return n
		}
	}
	return -1
}

// Node implements sluice.Noder: the shard of a Cluster that serves the
// client key's slot (see "Nodes"); 0 for a server alone, through Sentinel
// or sharded by the client (WithSharding), and on a Cluster before its
// map is read.
func (s *Store) Node(key string) int {
	if s.topo == nil {
		return 0
	}
	m := s.topo.m.Load()
	if m == nil {
		return 0
	}
	return int(m.slot[tagSlot(escape(key))])
}

// NodeName implements sluice.Noder: the address of the master of node as
// the Cluster last reported it; "" for node 0.
func (s *Store) NodeName(node int) string {
	if s.topo == nil {
		return ""
	}
	if m := s.topo.m.Load(); m != nil && node > 0 && node < len(m.masters) {
		return m.masters[node]
	}
	return ""
}

// nodeOf returns the node that serves g's slot, and its master's name.
func (s *Store) nodeOf(g *group) (int, string) {
	m := s.topo.m.Load()
	if m == nil {
		return 0, ""
	}
	n := int(m.slot[slot(g.keys[0])])
	return n, m.masters[n]
}

// failed returns err, the failure of g's script, as the error of Take:
// on a Cluster whose shards the Store maps, a sluice.NodeError naming the
// shard's master, so that a Limiter charges it to that node's breaker
// alone; answered are the groups that answered before g failed. A failure
// may be a failover or a slot moved: the map is read again.
func (s *Store) failed(g *group, answered []*group, err error) error {
	if s.topo == nil {
		return fmt.Errorf("redis store: %w", err)
	}
	s.topo.kick()
	n, name := s.nodeOf(g)
	if n == 0 {
		return fmt.Errorf("redis store: %w", err)
	}
	ne := &sluice.NodeError{Node: n, Err: fmt.Errorf("redis store: master %s: %w", name, err)}
	for _, a := range answered {
		if an, _ := s.nodeOf(a); an != n && an != 0 && !slices.Contains(ne.Answered, an) {
			ne.Answered = append(ne.Answered, an)
		}
	}
	return ne
}

// crcTable is CRC16-CCITT (XMODEM)'s, by byte, for tagSlot.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// tagSlot returns the Cluster hash slot of a key whose hash tag is tag
// (or of a key without one, tag being the key): CRC16 (XMODEM) of tag
// modulo 16384.
func tagSlot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^tag[i]]
	}
	return int(crc) % 16384
}
