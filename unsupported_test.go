package sluice

import (
	"context"
	"errors"
)

// unsupported gives a test store that only takes and resets the other
// methods of Store, each failing with errors.ErrUnsupported, as a store
// that cannot do them does.
type unsupported struct{}

func (unsupported) TakeAt(context.Context, Request) (Taken, error) {
	return Taken{}, errors.ErrUnsupported
}

func (unsupported) Refund(context.Context, Request, Taken) ([]Result, error) {
	return nil, errors.ErrUnsupported
}

func (unsupported) Charge(context.Context, Request) ([]Result, error) {
	return nil, errors.ErrUnsupported
}

func (unsupported) Renew(context.Context, Request) ([]Result, error) {
	return nil, errors.ErrUnsupported
}

func (unsupported) Peek(context.Context, Request) ([]Result, error) {
	return nil, errors.ErrUnsupported
}
