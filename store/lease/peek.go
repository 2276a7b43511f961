package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// Peek implements sluice.Store: what Take would answer for req on this
// replica, spending nothing. A leasable request (see the package
// documentation) that this replica's lease for its key can serve now is
// answered from the lease, as Take would answer it (admitted, Remaining
// what the lease would hold after it). Every other request is read from
// the backing store, so that its Result is
// the backing state's: that state counts the units leased to every
// replica as spent, used or not, so Remaining may be lower, and a denial
// may come sooner, than the units left unspent in leases would make it;
// those units are not seen. A leasable request that would refill its
// lease gets the backing store's answer for its own cost (step 3 of the
// refill), which admits whenever a block or the last units would.
func (s *Store) Peek(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	if s.leasable(req) {
		p := req.Parts[0]
		lim := p.Limits[0]
		own := req.Now.IsZero()
		now := req.Now
		if own {
			now = time.Now()
		}
		sh := s.shard(p.Key)
		sh.mu.Lock()
		e := sh.m[leaseKey{key: p.Key, id: lim.Identity()}]
		if e != nil && e.refill == nil && e.usable(now, own, p.Cost) {
			spent := *e
			spent.units -= p.Cost
			r := spent.result(now, lim)
			sh.mu.Unlock()
			return []sluice.Result{r}, nil
		}
		sh.mu.Unlock()
	}
	rs, err := s.backing.Peek(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return rs, nil
}
