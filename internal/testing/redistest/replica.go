package redistest

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// StartReplica starts a redis-server replicating primary for t, and
// returns once it is in sync (master_link_status:up); it stops it when t
// ends. It first sets the primary's repl-diskless-sync-delay to 0, so that
// the primary sends the dataset at once instead of waiting 5 seconds for
// more replicas to share the transfer.
func StartReplica(t testing.TB, primary *Server) *Server {
	t.Helper()
	path := Need(t)
	primary.Do(t, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
	r := retryPorts(t, func(p int) (*Server, error) {
		return launch(path, t.TempDir(), p, "", "--replicaof", "127.0.0.1", port(primary.Addr))
	})
	WaitSynced(t, r, 30*time.Second)
	return r
}

// WaitSynced waits until the replica r reports its link to its primary up
// (master_link_status:up, the initial sync done), failing t after within.
func WaitSynced(t testing.TB, r *Server, within time.Duration) {
	t.Helper()
	waitSynced(t, r, time.Now().Add(within))
}

// waitSynced waits until the replica r reports its link up, failing t at
// deadline.
func waitSynced(t testing.TB, r *Server, deadline time.Time) {
	t.Helper()
	waitFor(t, deadline, "the replica "+r.Addr+" to sync with its primary", func() error {
		info, err := command(r.Addr, "INFO", "replication")
		if err != nil {
			return err
		}
		if s, _ := info.(string); !strings.Contains(s, "master_link_status:up") {
			return errors.New("master_link_status is not up")
		}
		return nil
	})
}

// RestartReplica starts the data node the sentinels know as addr again,
// empty, on its port (a primary that KillPrimary killed, say), as a
// replica of primary (REPLICAOF, what the sentinels would make of it some
// seconds later), and returns it once it has synced. It fails t for a
// Sentinel started with TLS, whose nodes need their certificates, or for
// an addr that is not one of its nodes.
func (s *Sentinel) RestartReplica(t testing.TB, addr, primary string) *Server {
	t.Helper()
	if s.tls != nil {
		t.Fatal("redistest: RestartReplica does not restart the nodes of a Sentinel with TLS")
	}
	n := s.Node(t, addr).Restart(t)
	s.mu.Lock()
	s.nodes[addr] = n
	s.mu.Unlock()
	host, p, err := net.SplitHostPort(primary)
	if err != nil {
		t.Fatalf("redistest: primary %q: %v", primary, err)
	}
	n.Do(t, "REPLICAOF", host, p)
	WaitSynced(t, n, 30*time.Second)
	return n
}
