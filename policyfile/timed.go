package policyfile

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
)

// timed is the Redis store beneath a lease store, telling call of every
// call that reaches it (sluice.Hooks.StoreCall's operations), so that
// the store metrics of a file with lease sections count Redis's round
// trips, not the decisions a lease answered in process. It forwards
// sluice.Noder, for the Limiter's breakers per node.
type timed struct {
	s interface {
		sluice.Store
		sluice.Noder
	}
	call func(op string, took time.Duration, err error)
}

func (t timed) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	start := time.Now()
	r, err := t.s.Take(ctx, req)
	t.call("take", time.Since(start), err)
	return r, err
}

func (t timed) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	start := time.Now()
	r, err := t.s.TakeAt(ctx, req)
	t.call("take", time.Since(start), err)
	return r, err
}

func (t timed) Refund(ctx context.Context, req sluice.Request, tk sluice.Taken) ([]sluice.Result, error) {
	start := time.Now()
	r, err := t.s.Refund(ctx, req, tk)
	t.call("refund", time.Since(start), err)
	return r, err
}

func (t timed) Charge(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	start := time.Now()
	r, err := t.s.Charge(ctx, req)
	t.call("charge", time.Since(start), err)
	return r, err
}

func (t timed) Renew(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	start := time.Now()
	r, err := t.s.Renew(ctx, req)
	t.call("renew", time.Since(start), err)
	return r, err
}

func (t timed) Peek(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	start := time.Now()
	r, err := t.s.Peek(ctx, req)
	t.call("peek", time.Since(start), err)
	return r, err
}

func (t timed) Reset(ctx context.Context, key string, limits ...sluice.Limit) error {
	start := time.Now()
	err := t.s.Reset(ctx, key, limits...)
	t.call("reset", time.Since(start), err)
	return err
}

func (t timed) Node(key string) int      { return t.s.Node(key) }
func (t timed) NodeName(node int) string { return t.s.NodeName(node) }
