package linear

import "time"

// RunError returns what Record refuses r for, or nil.
func RunError(r Run) error { return r.check() }

// RoundBases returns the instant of each round of r, from Epoch.
func RoundBases(r Run) []time.Duration {
	bs := roundBases(r)
	out := make([]time.Duration, len(bs))
	for i, b := range bs {
		out[i] = b.Sub(Epoch)
	}
	return out
}

// Bounded is bounded: it reports a key of h with more than
// MaxIndeterminate failed decisions, and renumbers their ClientIds.
func Bounded(h History) error { return bounded(h) }
