package storetest

import (
	"context"
	"errors"

	"github.com/sluice-go/sluice"
)

// TakeOnly returns a Store that takes and resets as s does and can do
// nothing else: its TakeAt, Refund, Charge, Renew and Peek fail with
// errors.ErrUnsupported, as those of a backend that cannot do them would,
// so that a test can tell how a Limiter, a lease or a door answers such
// a store. It is no sluice.OneTaker.
func TakeOnly(s sluice.Store) sluice.Store { return takeOnly{s} }

// takeOnly is TakeOnly's Store.
type takeOnly struct{ s sluice.Store }

func (t takeOnly) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	return t.s.Take(ctx, req)
}

func (t takeOnly) Reset(ctx context.Context, key string, limits ...sluice.Limit) error {
	return t.s.Reset(ctx, key, limits...)
}

func (takeOnly) TakeAt(context.Context, sluice.Request) (sluice.Taken, error) {
	return sluice.Taken{}, errors.ErrUnsupported
}

func (takeOnly) Refund(context.Context, sluice.Request, sluice.Taken) ([]sluice.Result, error) {
	return nil, errors.ErrUnsupported
}

func (takeOnly) Charge(context.Context, sluice.Request) ([]sluice.Result, error) {
	return nil, errors.ErrUnsupported
}

func (takeOnly) Renew(context.Context, sluice.Request) ([]sluice.Result, error) {
	return nil, errors.ErrUnsupported
}

func (takeOnly) Peek(context.Context, sluice.Request) ([]sluice.Result, error) {
	return nil, errors.ErrUnsupported
}
