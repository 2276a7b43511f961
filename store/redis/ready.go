package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
)

// readyTag is the client key, as it appears in Redis keys (the hash tag),
// of the decisions Ready runs, and on a Cluster the start of each
// master's: readyTag followed by decimal digits. escape never produces
// them: it percent-encodes '%' in client keys, and its own forms starting
// with '%' are "%0" and "%H" and hex digits. So no client key, whatever
// the policy engine makes of it, shares state with Ready.
const readyTag = "%ready"

// readyLimit is the limit of Ready's decisions: so high that they are
// always admitted, so that each writes its key (a denied decision writes
// nothing, and would not meet a refused write), which expires within a
// second.
var readyLimit = sluice.Limit{Algorithm: sluice.FixedWindow, Limit: 1 << 30, Period: time.Second}

// Ready reports whether decisions can run now, for readiness probes: it
// runs the decision script, as Take does (by SHA, sending the source on
// NOSCRIPT), at the server's time, consuming 1 under a fixed window on
// the reserved key <prefix>:{%ready}f1s, which no client key can
// produce (readyTag) and which expires within a second. So it fails, with
// Redis's answer as the cause, wherever decisions fail: Redis down or
// unreachable, a user not permitted to run the script or the commands in
// it (NOPERM), a read-only replica (READONLY), an out-of-memory server
// (OOM).
//
// On a Cluster whose shards the Store maps (see "Nodes"), Ready reads the
// map again and runs the decision on every master at once, each on a
// reserved key in one of its slots, <prefix>:{%ready<n>}f1s for the
// smallest n that falls there (%ready itself if it does); it returns nil
// when every master serves, and otherwise a *ReadyError that names those
// that do not, and says whether the others serve (Serving).
func (s *Store) Ready(ctx context.Context) error {
	if s.topo == nil {
		if err := s.readyOn(ctx, readyTag); err != nil {
			return fmt.Errorf("redis store: not ready: %w", err)
		}
		return nil
	}
	err := s.topo.refresh(ctx)
	m := s.topo.m.Load()
	if m == nil {
		return fmt.Errorf("redis store: not ready: %w", err)
	}
	tags := m.tags()
	e := &ReadyError{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n, tag := range tags {
		if tag == "" {
			continue // node 0, or a shard that serves no slot now
		}
		e.Masters++
		wg.Go(func() {
			if err := s.readyOn(ctx, tag); err != nil {
				mu.Lock()
				defer mu.Unlock()
				e.Failing = append(e.Failing, MasterError{Master: m.masters[n], Err: err})
			}
		})
	}
	wg.Wait()
	if len(e.Failing) == 0 {
		return nil
	}
	slices.SortFunc(e.Failing, func(a, b MasterError) int { return strings.Compare(a.Master, b.Master) })
	return e
}

// readyOn runs Ready's decision on the reserved key of tag.
func (s *Store) readyOn(ctx context.Context, tag string) error {
	g := &group{keys: []string{s.prefix + ":{" + tag + "}" + algo.ID(readyLimit)}, limits: []sluice.Limit{readyLimit}, cost: 1}
	t, err := s.take(ctx, "", g, false)
	if err != nil && aclDenied(err) {
		return fmt.Errorf("NOPERM: the Redis user may not run a command of the decision script (see the ACL the README lists): %w", err)
	}
	if err != nil {
		return err
	}
	if !t.results[0].Allowed {
		return fmt.Errorf("the readiness decision on %s was denied", g.keys[0])
	}
	return nil
}

// maxReadyTags bounds the tags tried for a master's reserved key: a
// master of one slot has one in 16384 chances per tag, so the chance
// that none of 2^20 falls there is below e^-64.
const maxReadyTags = 1 << 20

// tags returns, by node, the hash tag of the reserved key of Ready's
// decision on the node's master: readyTag, or readyTag followed by the
// smallest number that puts it in one of the node's slots; "" for node 0
// and for a node that serves no slot. It is computed once per map.
func (m *nodeMap) tags() []string {
	m.readyOnce.Do(func() {
		m.readyTags = make([]string, len(m.masters))
		want := 0
		serves := make([]bool, len(m.masters))
		for _, n := range m.slot {
			if n != 0 && !serves[n] {
				serves[n] = true
				want++
			}
		}
		for i := 0; want > 0 && i < maxReadyTags; i++ {
			tag := readyTag
			if i > 0 {
				tag += strconv.Itoa(i)
			}
			if n := m.slot[tagSlot(tag)]; n != 0 && m.readyTags[n] == "" {
				m.readyTags[n] = tag
				want--
			}
		}
	})
	return m.readyTags
}

// ReadyError is the error of Ready on a Cluster when some of its masters
// do not run decisions: it names each, with its error.
type ReadyError struct {
	// Masters is how many masters Ready asked.
	Masters int
	// Failing are the masters that failed, by address.
	Failing []MasterError
}

// MasterError is the failure of Ready's decision on one master.
type MasterError struct {
	// Master is the master's address.
	Master string
	// Err is what Redis answered, or why it did not.
	Err error
}

// Error names the failing masters, each with its error.
func (e *ReadyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis store: not ready: %d of %d masters failing", len(e.Failing), e.Masters)
	for i, f := range e.Failing {
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		fmt.Fprintf(&b, "%s%s: %v", sep, f.Master, f.Err)
	}
	return b.String()
}

// Unwrap returns the masters' errors.
func (e *ReadyError) Unwrap() []error {
	errs := make([]error, len(e.Failing))
	for i, f := range e.Failing {
		errs[i] = f.Err
	}
	return errs
}

// Degraded returns the addresses of the failing masters.
func (e *ReadyError) Degraded() []string {
	out := make([]string, len(e.Failing))
	for i, f := range e.Failing {
		out[i] = f.Master
	}
	return out
}

// Serving reports whether some master runs decisions: the keys of its
// slots are decided by Redis, only those of the failing masters' slots
// are not.
func (e *ReadyError) Serving() bool { return len(e.Failing) < e.Masters }

// aclDenied reports whether err is Redis refusing a command to the
// connection's user: NOPERM, which Redis 7.0 answers, inside a script, as
// "ERR The user executing the script can't run this command or
// subcommand", without naming it.
func aclDenied(err error) bool {
	m := err.Error()
	return strings.Contains(m, "NOPERM") || strings.Contains(m, "user executing the script can't run this command")
}
