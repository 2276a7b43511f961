package lease

import "time"

// Outlive makes s's leases end d later than the backing state allows: the
// fault the overshoot tests must catch.
func Outlive(s *Store, d time.Duration) { s.outlive = d }
