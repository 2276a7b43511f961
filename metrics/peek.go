package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// Peek implements sluice.Peeker for the instrumented store, so that a
// Limiter over it can Peek (sluice inspect): it forwards to the wrapped
// store, recording the call in sluice_store_duration_seconds{op="peek"}
// and, when it fails, sluice_store_errors_total{op="peek"}. A wrapped
// store without Peek gives an error wrapping sluice.ErrPeekUnsupported,
// not counted as a store error.
func (s *store) Peek(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	pk, ok := s.next.(sluice.Peeker)
	if !ok {
		return nil, fmt.Errorf("metrics: %T: %w", s.next, sluice.ErrPeekUnsupported)
	}
	start := time.Now()
	rs, err := pk.Peek(ctx, req)
	s.m.peek.observe(start, err)
	return rs, err
}
