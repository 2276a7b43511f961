package redis

import (
	"context"
	"fmt"
	"time"

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

// Refund gives back what s.Take(req) consumed, which answered rs at
// req.Now, as a decision split over Cluster slots does when a later slot
// denies, at the instant at (zero: the server's clock); it returns the
// state after the refund. req must be one group (not split) and have its
// own Now.
func (s *Store) Refund(ctx context.Context, req sluice.Request, rs []sluice.Result, at time.Time) ([]sluice.Result, error) {
	gs := s.groups(req)
	if len(gs) != 1 || req.Now.IsZero() {
		return nil, fmt.Errorf("Refund: %d groups and now %v; want one group and a now", len(gs), req.Now)
	}
	return s.refund(ctx, clockArg(at), gs[0], taken{results: rs, now: req.Now.UnixMicro()})
}

// ParseURL returns the rueidis options Open builds from url (parseURL).
var ParseURL = parseURL
