package memory

import (
	"context"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
)

// Peek implements sluice.Store: it returns what Take would return for
// req, deciding with the same algorithms on the same state under the same
// locks, and stores nothing. It creates no entry for a key never seen,
// converts no state kept under another Limit or Burst (Take would, and
// Peek decides on the converted state as Take does), and does not touch
// the entries it reads: they keep their place in their shard's least
// recently used order and their expiry, and a peek counts as no decision
// for eviction, so that an operator's look at a key can neither keep it
// in a full store nor push another key out.
func (s *Store) Peek(_ context.Context, req sluice.Request) ([]sluice.Result, error) {
	n := req.Len()
	rs := make([]sluice.Result, n)
	var buf [4]decision
	var work []decision
	if n <= len(buf) {
		work = buf[:n]
	} else {
		work = make([]decision, n)
	}
	var shards [4]int
	var scratch [256]byte
	keys, locked := s.lock(req.Parts, work, scratch[:0], shards[:0])
	defer s.unlock(locked)
	now := s.micros(req.Now) // once locked, as take reads it

	allowed := true
	i := 0
	for _, p := range req.Parts {
		for _, l := range p.Limits {
			d := &work[i]
			if j := d.sh.find(keys[d.k0:d.k1], d.h); j != 0 {
				if e := d.sh.at(j); e.expires > now {
					d.st = d.sh.state(j)
				}
			}
			if st, _, ok := algo.Convert(l, d.st, now); ok {
				d.st = st // as Take reads it, unstored
			}
			rs[i], _, _ = algo.Check(l, d.st, now, int64(p.Cost))
			allowed = allowed && rs[i].Allowed
			i++
		}
	}
	if !allowed {
		asIs(req.Parts, work, rs, now) // as Take answers a denial
	}
	return rs, nil
}
