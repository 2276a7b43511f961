package redis

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// WithWaitReplicas implements "Replicated decisions" in the package doc
// (redis.go).

// WithWaitReplicas makes every decision that consumed wait, before it is
// answered, until n replicas of the primary have acknowledged its write:
// the decision's script is followed on the same connection by Redis's
// WAIT n timeout, in the same round trip (one WAIT per coalesced batch).
// A decision that admitted and consumed but that fewer than n replicas
// acknowledged within timeout fails with an error wrapping
// ErrNotReplicated, so that the Limiter's error policy answers it, while
// its consumption stays on the primary (see "Replicated decisions").
//
// timeout is rounded up to the millisecond (WAIT counts in milliseconds)
// and must leave the decision time under the store timeout
// (sluice.WithStoreTimeout, sluice.DefaultStoreTimeout by default): half
// of it is a good start. WithWaitReplicas panics if n is below 1 or
// timeout is not positive: WAIT 0 would block forever. New panics if its
// Client has no WAIT (it must implement Waiter, as the rueidis and
// go-redis adapters do) or the store splits decisions (a Cluster, a
// Ring), where WAIT is not supported; Open returns an error wrapping
// ErrWaitUnsupported for a Cluster instead. Over FromRueidis, a client
// built with ClientOption.ConnLifetime may send a WAIT apart from its
// script (see rueidisClient.intsWait): leave ConnLifetime unset.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	if n < 1 {
		panic(fmt.Sprintf("redis store: WithWaitReplicas: %d replicas, want at least 1", n))
	}
	if timeout <= 0 {
		panic(fmt.Sprintf("redis store: WithWaitReplicas: timeout %v, want a positive one (WAIT 0 blocks forever)", timeout))
	}
	ms := (timeout + time.Millisecond - 1) / time.Millisecond
	return func(s *Store) { s.wait = waitSpec{replicas: n, ms: int64(ms)} }
}

// waitSpec is what WithWaitReplicas asked: replicas 0 means no WAIT.
type waitSpec struct {
	replicas int
	ms       int64
}

// Waiter is a Client that also runs a script followed by WAIT on the same
// connection, for WithWaitReplicas. Each method returns the script's
// reply, as Client's does, and WAIT's: the number of replicas that
// acknowledged every write the connection made before it, within
// timeout. The two commands must go on one connection, the WAIT right
// after the script with no command of another caller between them that
// could fail it (another caller's write between them only makes WAIT
// wait for more). When the script fails, acked is meaningless.
type Waiter interface {
	EvalShaWait(ctx context.Context, sha1 string, keys, args []string, replicas int, timeout time.Duration) (reply []int64, acked int64, err error)
	EvalWait(ctx context.Context, script string, keys, args []string, replicas int, timeout time.Duration) (reply []int64, acked int64, err error)
}

// ErrNotReplicated is wrapped by the error of a decision that admitted
// and consumed on the primary, but that fewer replicas than
// WithWaitReplicas asks acknowledged within its timeout: it may be lost in
// a failover, so the store does not answer it as admitted.
var ErrNotReplicated = errors.New("admitted on the primary, not acknowledged by enough replicas")

// ErrWaitUnsupported is wrapped by the error of Open when WithWaitReplicas
// is asked of a Redis Cluster, where a decision's WAIT would have to
// follow its script through every redirection to the master that runs it.
var ErrWaitUnsupported = errors.New("wait_replicas (WAIT) is supported on standalone Redis and Sentinel, not on a Cluster")

// checkWait panics when s asks WithWaitReplicas of a Client or a topology
// that cannot honor it.
func (s *Store) checkWait() {
	if s.wait.replicas == 0 {
		return
	}
	if _, ok := s.client.(Waiter); !ok {
		panic(fmt.Sprintf("redis store: WithWaitReplicas: the Client (%T) does not implement Waiter", s.client))
	}
	if s.split != unsplit {
		panic("redis store: WithWaitReplicas: " + ErrWaitUnsupported.Error() + " or a client-side sharded one")
	}
}

// evalWait runs sc as eval does, followed by WAIT on its connection, and
// returns the script's reply and the replicas that acknowledged.
func (s *Store) evalWait(ctx context.Context, sc script, keys, args []string) ([]int64, int64, error) {
	w := s.client.(Waiter) // checked by New (checkWait)
	n, timeout := s.wait.replicas, time.Duration(s.wait.ms)*time.Millisecond
	reply, acked, err := w.EvalShaWait(ctx, sc.sha, keys, args, n, timeout)
	if errors.Is(err, ErrNoScript) {
		reply, acked, err = w.EvalWait(ctx, sc.src, keys, args, n, timeout)
	}
	return reply, acked, err
}

// replicated returns the error of a decision t of g that the WAIT after it
// answered acked, or nil: an error when t admitted and consumed, and fewer
// replicas than asked acknowledged.
func (s *Store) replicated(g *group, t taken, acked int64) error {
	if acked >= int64(s.wait.replicas) || !allowed(t.results) || !g.consumes() {
		return nil
	}
	return fmt.Errorf("%w: %d of the %d asked within %dms (WAIT)", ErrNotReplicated, acked, s.wait.replicas, s.wait.ms)
}

// consumes reports whether a decision of g spends anything when admitted:
// a decision of cost 0 (a breaker's probe) writes nothing that a failover
// could lose.
func (g *group) consumes() bool {
	for i := range g.limits {
		if g.costOf(i) > 0 {
			return true
		}
	}
	return false
}

// waits reports whether a decision of g, taken (not a peek), needs WAIT.
func (s *Store) waits(g *group, peek bool) bool {
	return s.wait.replicas > 0 && !peek && g.consumes()
}

// takeWait decides g at now as take does, followed by WAIT (evalWait).
func (s *Store) takeWait(ctx context.Context, now string, g *group) (taken, error) {
	reply, acked, err := s.evalWait(ctx, scriptFor(g.limits), g.keys, groupArgs(now, g, false))
	if err != nil {
		return taken{}, err
	}
	t, err := groupTaken(g, reply)
	if err != nil {
		return taken{}, err
	}
	return t, s.replicated(g, t, acked)
}
