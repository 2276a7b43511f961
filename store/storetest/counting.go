package storetest

import (
	"context"
	"sync/atomic"

	"github.com/sluice-go/sluice"
)

// Counting wraps a Store and counts the Take, Peek, Refund and Charge
// calls that reach it (a TakeAt counts as a Take), so that a test can tell
// how many decisions a cache or a lease spared the store, or how many
// store calls a settle made. It forwards sluice.Noder to the wrapped Store (one
// node if it is no Noder).
// It is no sluice.OneTaker, so a Limiter over it sends every decision
// through Take.
type Counting struct {
	sluice.Store
	takes   atomic.Int64
	peeks   atomic.Int64
	refunds atomic.Int64
	charges atomic.Int64
}

// Take counts the call and passes it to the wrapped Store.
func (c *Counting) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, req)
}

// Takes returns how many Take calls have reached the wrapped Store.
func (c *Counting) Takes() int64 { return c.takes.Load() }

// Peek counts the call and passes it to the wrapped Store.
func (c *Counting) Peek(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	c.peeks.Add(1)
	return c.Store.Peek(ctx, req)
}

// TakeAt counts the call as a Take and passes it to the wrapped Store.
func (c *Counting) TakeAt(ctx context.Context, req sluice.Request) (sluice.Taken, error) {
	c.takes.Add(1)
	return c.Store.TakeAt(ctx, req)
}

// Refund counts the call and passes it to the wrapped Store.
func (c *Counting) Refund(ctx context.Context, req sluice.Request, t sluice.Taken) ([]sluice.Result, error) {
	c.refunds.Add(1)
	return c.Store.Refund(ctx, req, t)
}

// Charge counts the call and passes it to the wrapped Store.
func (c *Counting) Charge(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	c.charges.Add(1)
	return c.Store.Charge(ctx, req)
}

// Refunds returns how many Refund calls have reached the Counting store.
func (c *Counting) Refunds() int64 { return c.refunds.Load() }

// Charges returns how many Charge calls have reached the Counting store.
func (c *Counting) Charges() int64 { return c.charges.Load() }

// Peeks returns how many Peek calls have reached the Counting store.
func (c *Counting) Peeks() int64 { return c.peeks.Load() }

// Node implements sluice.Noder: the wrapped Store's node of key.
func (c *Counting) Node(key string) int {
	if n, ok := c.Store.(sluice.Noder); ok {
		return n.Node(key)
	}
	return 0
}

// NodeName implements sluice.Noder: the wrapped Store's name of node.
func (c *Counting) NodeName(node int) string {
	if n, ok := c.Store.(sluice.Noder); ok {
		return n.NodeName(node)
	}
	return ""
}
