package storetest

import (
	"context"
	"sync/atomic"

	"github.com/sluice-go/sluice"
)

// Counting wraps a Store and counts the Take calls that reach it, so that
// a test can tell how many decisions a cache or a lease spared the store.
// It is no sluice.OneTaker, so a Limiter over it sends every decision
// through Take.
type Counting struct {
	sluice.Store
	takes atomic.Int64
}

// Take counts the call and passes it to the wrapped Store.
func (c *Counting) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, req)
}

// Takes returns how many Take calls have reached the wrapped Store.
func (c *Counting) Takes() int64 { return c.takes.Load() }
