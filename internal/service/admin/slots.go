package admin

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

// slotsTimeout bounds the store reads of the slots in use of one Stats,
// so that a store that does not answer does not hold the page's poll.
const slotsTimeout = 2 * time.Second

// SlotsInUse is one concurrency limit's slots, in Stats.
type SlotsInUse struct {
	// Rule is the rule's name, Limit its concurrency limit's (such as
	// jobs-concurrent).
	Rule  string `json:"rule"`
	Limit string `json:"limit"`
	// Slots is how many may be held at once: per client key for a rule
	// keyed by client (PerKey).
	Slots int `json:"slots"`
	// InUse is how many are held now, read from the store (a look that
	// spends nothing): the whole fleet's, held by every replica sharing
	// the store and by the clients of /v1/check alike. It is at most
	// Slots (under a limit a reload lowered, more may be held until
	// their leases end). It is null for a rule keyed by client, whose
	// slots are counted per key (sluice inspect reads a key's), and when
	// the store could not be read (Error).
	InUse *int `json:"in_use"`
	// PerKey says the slots are counted per client key: the rule is not
	// keyed global.
	PerKey bool `json:"per_key,omitempty"`
	// Error says why the store could not be read.
	Error string `json:"error,omitempty"`
}

// slotsInUse returns the slots of each concurrency limit of e's rules, in
// their order: those of a rule keyed global read from the store.
func slotsInUse(ctx context.Context, e *policy.Engine) []SlotsInUse {
	out := []SlotsInUse{}
	if e == nil {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, slotsTimeout)
	defer cancel()
	for _, r := range e.Rules().Rules() {
		first := len(out)
		for _, l := range r.Limits {
			if l.Algorithm == sluice.Concurrency {
				out = append(out, SlotsInUse{Rule: r.Name, Limit: l.Name, Slots: l.Limit, PerKey: r.Key.Source != policy.KeyGlobal})
			}
		}
		if len(out) == first || out[first].PerKey {
			continue
		}
		zero := 0
		c := policy.Check{Rule: r.Name, Cost: &zero}
		if p := r.Priority; p != nil && len(p.Classes) > 0 {
			// The highest class's limits are the rule's whole: a lower
			// class's are cut to its share.
			c.Class = p.Classes[0].Name
		}
		in, err := e.Inspect(ctx, c)
		for i := first; i < len(out); i++ {
			s := &out[i]
			if err != nil {
				s.Error = err.Error()
				continue
			}
			for _, ls := range in.Limits {
				if ls.Limit.Algorithm == sluice.Concurrency && ls.Limit.Name == s.Limit {
					n := max(ls.Limit.Limit-ls.Result.Remaining, 0)
					s.Slots, s.InUse = ls.Limit.Limit, &n
				}
			}
		}
	}
	return out
}
