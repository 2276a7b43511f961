package sluice

import (
	"context"
	"time"
)

// Store keeps rate-limit state and decides requests atomically. The memory
// and Redis stores in this module implement it; every implementation must
// pass the conformance suite in package storetest.
//
// A Limiter validates every Request before it reaches the store, so a Store
// may assume valid limits and costs.
type Store interface {
	// Take decides whether req.Cost fits in every one of req.Limits for
	// req.Key and, if and only if it fits in all of them, consumes it from
	// all of them, in one atomic step. It returns one Result per limit in the
	// same order. A zero req.Now means the store's own clock.
	Take(ctx context.Context, req Request) ([]Result, error)
	// Reset forgets the state of key under each of limits.
	Reset(ctx context.Context, key string, limits ...Limit) error
}

// Request is one decision asked of a Store.
type Request struct {
	// Key identifies the client (an API key, a user ID, an address).
	Key string
	// Limits are checked all or nothing; they must have distinct identities
	// (Name, Algorithm, Limit, Period, Burst).
	Limits []Limit
	// Cost is how much the request consumes; 0 asks for the state without
	// consuming anything.
	Cost int
	// Now is the instant of the decision. The zero value means the store's
	// clock: the Redis server's TIME for the Redis store, so that replicas
	// with skewed clocks agree.
	Now time.Time
}
