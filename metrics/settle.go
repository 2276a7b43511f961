package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// settling is the instrumented store of a sluice.Settler, itself one, so
// that a Limiter over it can Reserve; the store of a store that is no
// Settler is no Settler either, and Reserve refuses it up front.
type settling struct {
	*store
	settler sluice.Settler // store.next
}

// TakeAt implements sluice.Settler: it forwards to the wrapped store,
// recording the call as a take (op="take").
func (s *settling) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	start := time.Now()
	t, err := s.settler.TakeAt(ctx, req)
	s.m.take.observe(start, err)
	return t, err
}

// Refund implements sluice.Settler: it forwards to the wrapped store,
// recording the call under op="refund".
func (s *settling) Refund(ctx context.Context, req sluice.Request, t sluice.Taken) ([]sluice.Result, error) {
	start := time.Now()
	rs, err := s.settler.Refund(ctx, req, t)
	s.m.refund.observe(start, err)
	return rs, err
}

// Renew implements sluice.Renewer: it forwards to the wrapped store,
// recording the call under op="renew", or fails with an error wrapping
// sluice.ErrRenewUnsupported when the wrapped store is no Renewer.
func (s *settling) Renew(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	rn, ok := s.next.(sluice.Renewer)
	if !ok {
		return nil, fmt.Errorf("metrics: %T: %w", s.next, sluice.ErrRenewUnsupported)
	}
	start := time.Now()
	rs, err := rn.Renew(ctx, req)
	s.m.renew.observe(start, err)
	return rs, err
}

// Charge implements sluice.Settler: it forwards to the wrapped store,
// recording the call under op="charge".
func (s *settling) Charge(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	start := time.Now()
	rs, err := s.settler.Charge(ctx, req)
	s.m.charge.observe(start, err)
	return rs, err
}
