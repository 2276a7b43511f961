package redis

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

// NewClient connects a rueidis client as Open does (newClient), for tests
// that build their clients from options.
func NewClient(opt rueidis.ClientOption) (rueidis.Client, error) { return newClient(opt) }

// ScriptSHAs returns the SHA-1 of each algorithm's decision script, and of
// the script of all five, for tests that ask the server which ran.
func ScriptSHAs() (map[sluice.Algorithm]string, string) {
	shas := make(map[sluice.Algorithm]string)
	for _, a := range sluice.Algorithms {
		shas[a] = compose("take", a).sha
	}
	return shas, allScript.sha
}

// Slot is the Cluster hash slot by which a store on a Cluster groups key.
var Slot = slot

// ParseURL returns the rueidis options Open builds from url (parseURL).
var ParseURL = parseURL

// MaxInFlight is how many script calls of a lane go before decisions queue.
const MaxInFlight = maxInFlight

// SettleBatches returns the settle batch calls the store sent (of 2
// refunds or charges or more).
func (s *Store) SettleBatches() int64 {
	if s.co == nil {
		return 0
	}
	return s.co.settleBatches.Load()
}

// RefundsWithDecisions returns the batch calls of decisions that carried
// refunds too (refund_first.lua).
func (s *Store) RefundsWithDecisions() int64 {
	if s.co == nil {
		return 0
	}
	return s.co.mixed.Load()
}

// Coalesced returns how many batch calls of two decisions or more s sent,
// how many decisions they carried and the most one carried.
func (s *Store) Coalesced() (batches, decisions, largest int64) {
	if s.co == nil {
		return 0, 0, 0
	}
	return s.co.batches.Load(), s.co.decisions.Load(), s.co.largest.Load()
}

// Lanes returns how many script calls of s are in flight and how many
// decisions wait in its queues.
func (s *Store) Lanes() (busy, queued int) {
	if s.co == nil {
		return 0, 0
	}
	for i := range s.co.lanes {
		if l := s.co.lanes[i].Load(); l != nil {
			l.mu.Lock()
			busy += l.busy
			queued += len(l.queue)
			l.mu.Unlock()
		}
	}
	return busy, queued
}

// TakeBatch decides reqs, each of one group, in one call of batch.lua, in
// order, and returns each one's Results and the now it was decided at
// (µs).
func (s *Store) TakeBatch(ctx context.Context, reqs []sluice.Request) ([][]sluice.Result, []int64, error) {
	b := make([]*call, len(reqs))
	for i, req := range reqs {
		gs := s.groups(req)
		if len(gs) != 1 {
			return nil, nil, fmt.Errorf("TakeBatch: request %d has %d groups, want 1", i, len(gs))
		}
		b[i] = &call{ctx: ctx, now: clockArg(req.Now), g: gs[0]}
	}
	ts, err := s.takeBatch(ctx, b, nil)
	if err != nil {
		return nil, nil, err
	}
	rs, nows := make([][]sluice.Result, len(ts)), make([]int64, len(ts))
	for i, t := range ts {
		rs[i], nows[i] = t.results, t.now
	}
	return rs, nows, nil
}

// SendBatch sends reqs, each of one group, as the coalescer sends a batch
// it took from a queue, and returns what each decision got.
func (s *Store) SendBatch(ctx context.Context, reqs []sluice.Request) ([][]sluice.Result, []error) {
	b := make([]*call, len(reqs))
	for i, req := range reqs {
		b[i] = &call{ctx: ctx, now: clockArg(req.Now), g: s.groups(req)[0], done: make(chan struct{}, 1)}
	}
	s.co.send(b)
	rs, errs := make([][]sluice.Result, len(b)), make([]error, len(b))
	for i, cl := range b {
		<-cl.done
		rs[i], errs[i] = cl.t.results, cl.err
	}
	return rs, errs
}

// BatchCompact reports whether a batch of reqs, each of one group, goes
// to batch.lua in the compact form (batchArgs).
func (s *Store) BatchCompact(reqs []sluice.Request) bool {
	b := make([]*call, len(reqs))
	for i, req := range reqs {
		b[i] = &call{now: clockArg(req.Now), g: s.groups(req)[0]}
	}
	_, _, args := batchArgs(b)
	return args[0][0] == '-'
}

// ShardsOf returns the ShardLister of the Client FromRueidis makes of c.
func ShardsOf(c rueidis.Client) ShardLister { return rueidisClient{c} }

// SlotsShards returns the shards of c's Cluster read from CLUSTER SLOTS,
// as Shards reads them on a server without CLUSTER SHARDS.
func SlotsShards(ctx context.Context, c rueidis.Client) ([]Shard, error) {
	v, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	return slotsShards(v)
}

// ApplyShards maps shards as a refresh that read them does, numbering
// them after the map before: nodes returns the number of each master
// (by address) in the new map.
func (s *Store) ApplyShards(shards []Shard) (nodes map[string]int) {
	s.topo.apply(shards)
	m := s.topo.m.Load()
	nodes = map[string]int{}
	for n, master := range m.masters {
		for _, sh := range shards {
			if sh.Master == master && n > 0 {
				nodes[master] = n
			}
		}
	}
	return nodes
}

// Mapped returns a Store on no Cluster whose map of shards is what
// ApplyShards makes of them.
func Mapped() *Store {
	return &Store{prefix: "sluice", split: bySlot, topo: &topology{lister: noShards{}}}
}

type noShards struct{}

func (noShards) Shards(context.Context) ([]Shard, error) { return nil, errors.New("no Cluster") }
