package sluice

import (
	"context"
	"errors"
	"testing"
)

// failingStore fails every call with err, after calling before.
type failingStore struct {
	unsupported
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

// TestValidateParts: limits of one key share state when their identities
// are equal, in one part or across parts; the same limit on two keys, or
// two names on one key, do not.
func TestValidateParts(t *testing.T) {
	a, b := PerHour(5).Named("a"), PerHour(10).Named("a") // one identity
	c := PerHour(5).Named("c")
	for _, tt := range []struct {
		name  string
		parts []Part
		bad   bool
	}{
		{"one part, one identity twice", []Part{{Key: "k", Limits: []Limit{a, b}, Cost: 1}}, true},
		{"two parts of one key, one identity", []Part{{Key: "k", Limits: []Limit{c, a}, Cost: 1}, {Key: "k", Limits: []Limit{b}, Cost: 1}}, true},
		{"two keys, one identity", []Part{{Key: "k", Limits: []Limit{a}, Cost: 1}, {Key: "j", Limits: []Limit{b}, Cost: 1}}, false},
		{"one key, two names", []Part{{Key: "k", Limits: []Limit{a}, Cost: 1}, {Key: "k", Limits: []Limit{c}, Cost: 1}}, false},
		{"a cost one part cannot admit", []Part{{Key: "k", Limits: []Limit{a}, Cost: 1}, {Key: "j", Limits: []Limit{c}, Cost: 6}}, true},
	} {
		err := validate(tt.parts)
		if (err != nil) != tt.bad || tt.bad && !errors.Is(err, ErrInvalidLimit) && !errors.Is(err, ErrInvalidCost) {
			t.Errorf("%s: validate = %v, want an error: %v", tt.name, err, tt.bad)
		}
	}
}
