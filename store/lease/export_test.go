package lease

import (
	"time"

	"github.com/sluice-go/sluice"
)

// Outlive makes s's leases end d later than the backing state allows: the
// fault the overshoot tests must catch.
func Outlive(s *Store, d time.Duration) { s.outlive = d }

// Waiters returns how many requests wait for the refill in flight of
// key's lease under l (0 when none is in flight).
func Waiters(s *Store, key string, l sluice.Limit) int {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[leaseKey{key: key, id: l.Identity()}]; e != nil && e.refill != nil {
		return e.refill.waiters
	}
	return 0
}

// KeepRests makes s give nothing back, as over a backing store that is no
// Settler: the control the give-back tests must catch.
func KeepRests(s *Store) { s.keepRests = true }
