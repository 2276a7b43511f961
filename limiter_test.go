package sluice

import (
	"context"
	"errors"
	"testing"
)

// failingStore fails every call with err, after calling before.
type failingStore struct {
	before func()
	err    error
}

func (s *failingStore) Take(context.Context, Request) ([]Result, error) {
	s.before()
	return nil, s.err
}

func (s *failingStore) Reset(context.Context, string, ...Limit) error { return s.err }

// TestCanceledGetsContextError: a caller that cancels gets its context's
// error whatever the policy, even when the store fails with an error of its
// own rather than the context's; the store's error is kept too.
func TestCanceledGetsContextError(t *testing.T) {
	storeErr := errors.New("connection reset by peer")
	for _, p := range []ErrorPolicy{ReturnErrors, AllowOnError, DenyOnError} {
		ctx, cancel := context.WithCancel(context.Background())
		lim := New(&failingStore{before: cancel, err: storeErr}, WithErrorPolicy(p))
		_, err := lim.Allow(ctx, "k", PerSecond(1))
		if !errors.Is(err, context.Canceled) || !errors.Is(err, storeErr) {
			t.Errorf("%s: Allow canceled during a store failure: err = %v, want context.Canceled and the store's error", p, err)
		}
		_, err = lim.AllowAll(ctx, "k", 1, PerSecond(1))
		if !errors.Is(err, context.Canceled) || !errors.Is(err, storeErr) {
			t.Errorf("%s: AllowAll canceled during a store failure: err = %v, want context.Canceled and the store's error", p, err)
		}
	}
}
