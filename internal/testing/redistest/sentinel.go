package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The sentinels' settings, chosen for a fast and reliable failover on
// loopback (see the sentinel.conf written by startSentinel).
const (
	// SentinelDownAfter is down-after-milliseconds: how long the primary
	// must be unreachable before a sentinel deems it down. It is also the
	// sentinels' PING period. Under a second risks a false failover on a
	// loaded machine; more only lengthens the outage.
	SentinelDownAfter = 1000 * time.Millisecond
	// SentinelFailoverTimeout is failover-timeout: how long a failover may
	// take before it is aborted, and half the wait before a sentinel
	// retries an election that elected no leader.
	SentinelFailoverTimeout = 3000 * time.Millisecond
)

// Sentinel is a Redis Sentinel deployment for tests: a primary, one replica
// of it and three sentinels monitoring it with a quorum of 2, every process
// on its own loopback port and stopped by pid when the test ends. Its
// methods are safe for concurrent use.
type Sentinel struct {
	// MasterName is the name the sentinels monitor the primary under (the
	// master_set of URL).
	MasterName string
	// Addrs holds the three sentinels' host:port on 127.0.0.1.
	Addrs []string
	// TLSAddrs holds the sentinels' TLS host:port, in the order of Addrs,
	// for a Sentinel started with StartSentinelTLS; else nil.
	TLSAddrs []string

	tls       *TLSFiles // nil: no TLS
	mu        sync.Mutex
	nodes     map[string]*Server // the primary and the replica, by the address the sentinels know (known)
	sentinels []*Server
}

// StartSentinel starts a primary, a replica and three sentinels for t, and
// returns once the replica is in sync and every sentinel knows the replica
// and the two other sentinels, so that a failover can happen. It stops
// every process when t ends, and on failure logs what the sentinels said.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return startSentinel(t, nil)
}

// StartSentinelTLS is StartSentinel with a TLS port on every process
// besides its plain one (which the helpers use), serving a certificate of
// new TLSFiles, which it returns. Replication and the sentinels' links to
// the primary and the replica run over TLS (tls-replication yes), so the
// sentinels know and name the nodes by their TLS ports: Primary,
// KillPrimary and WaitFailover take and return those addresses, and URL
// is a rediss:// URL of the sentinels' TLS ports, to which the caller adds
// the TLS options.
func StartSentinelTLS(t testing.TB) (*Sentinel, TLSFiles) {
	t.Helper()
	files := NewTLSFiles(t)
	return startSentinel(t, &files), files
}

// startSentinel starts a Sentinel deployment, over TLS too when files is
// not nil.
func startSentinel(t testing.TB, files *TLSFiles) *Sentinel {
	t.Helper()
	path := Need(t)
	s := &Sentinel{MasterName: "sluice", nodes: make(map[string]*Server), tls: files}
	// Each process is stopped by its own cleanup, registered once it
	// started, after its directory was created: it stops before the
	// directory is removed. This one, registered first, runs last.
	t.Cleanup(func() { s.logOnFailure(t) })

	// The replica syncs at once (no 5s wait for more replicas to share
	// a diskless transfer), and either node may end up the primary.
	node := []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	primary := s.startNode(t, path, node...)
	replica := s.startNode(t, path, append(node, "--replicaof", "127.0.0.1", port(s.known(primary)))...)
	deadline := time.Now().Add(30 * time.Second)
	waitSynced(t, replica, deadline)

	// The sentinels start after the sync, so that the first INFO each
	// sends the primary lists the replica (the next comes 10s later).
	for range 3 {
		sn := s.startSentinel(t, path, s.known(primary))
		s.sentinels = append(s.sentinels, sn)
		s.Addrs = append(s.Addrs, sn.Addr)
		if files != nil {
			s.TLSAddrs = append(s.TLSAddrs, sn.TLSAddr)
		}
	}
	for _, addr := range s.Addrs {
		waitFor(t, deadline, "sentinel "+addr+" to know the replica and the other sentinels", func() error {
			return s.ready(addr, s.known(replica))
		})
	}
	return s
}

// URL returns the Redis URL that connects through the sentinels, as
// sluice's redis.Open takes it: with TLS (StartSentinelTLS), a rediss://
// URL of their TLS ports, without the TLS options.
func (s *Sentinel) URL() string {
	scheme, addrs := "redis://", s.Addrs
	if s.tls != nil {
		scheme, addrs = "rediss://", s.TLSAddrs
	}
	u := scheme + addrs[0] + "?"
	for _, a := range addrs[1:] {
		u += "addr=" + a + "&"
	}
	return u + "master_set=" + s.MasterName
}

// known returns the address by which the sentinels know the data node n:
// its TLS address under TLS, else its address.
func (s *Sentinel) known(n *Server) string {
	if s.tls != nil {
		return n.TLSAddr
	}
	return n.Addr
}

// Primary returns the primary's address according to the first sentinel
// that answers. During a failover the sentinels may disagree.
func (s *Sentinel) Primary() (string, error) {
	var lastErr error
	for _, a := range s.Addrs {
		addr, err := s.masterOf(a)
		if err == nil {
			return addr, nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("no sentinel named the primary: %w", lastErr)
}

// KillPrimary kills the current primary's process (SIGKILL, by pid), waits
// for it to exit and returns its address. The process is not restarted.
func (s *Sentinel) KillPrimary(t testing.TB) string {
	t.Helper()
	addr, err := s.Primary()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.mu.Lock()
	n := s.nodes[addr]
	s.mu.Unlock()
	if n == nil {
		t.Fatalf("redistest: the sentinels name %s as the primary, which this Sentinel did not start", addr)
	}
	n.Stop()
	return addr
}

// WaitFailover waits until a sentinel names a primary other than old and
// that server answers with role:master, and returns its address. A
// sentinel names the new primary once it has promoted it (or heard that
// another did), which is when it announces +switch-master to clients. It
// fails t if that takes longer than within.
func (s *Sentinel) WaitFailover(t testing.TB, old string, within time.Duration) string {
	t.Helper()
	var found string
	waitFor(t, time.Now().Add(within), "the sentinels to promote a new primary", func() error {
		var lastErr error
		for _, a := range s.Addrs {
			addr, err := s.masterOf(a)
			switch {
			case err != nil:
				lastErr = err
			case addr == old:
				lastErr = fmt.Errorf("sentinel %s still names %s", a, old)
			default:
				if err := s.isMaster(addr); err != nil {
					lastErr = err
					continue
				}
				found = addr
				return nil
			}
		}
		return lastErr
	})
	return found
}

// NodeAddrs returns the plain addresses of the data nodes, the primary
// and the replica, in no particular order.
func (s *Sentinel) NodeAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs := make([]string, 0, len(s.nodes))
	for _, n := range s.nodes {
		addrs = append(addrs, n.Addr)
	}
	return addrs
}

// Node returns the data node (the primary or the replica) that the
// sentinels know as addr, failing t if this Sentinel started none such.
func (s *Sentinel) Node(t testing.TB, addr string) *Server {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[addr]
	if n == nil {
		t.Fatalf("redistest: %s is not a node this Sentinel started", addr)
	}
	return n
}

// startNode starts a data node on a free port, retrying when the port was
// taken meanwhile, and stops it when t ends.
func (s *Sentinel) startNode(t testing.TB, path string, extra ...string) *Server {
	t.Helper()
	var n *Server
	if s.tls != nil {
		n = startTLS(t, path, *s.tls, "", append(extra, "--tls-replication", "yes")...)
	} else {
		n = retryPorts(t, func(port int) (*Server, error) {
			return launch(path, t.TempDir(), port, "", extra...)
		})
	}
	s.mu.Lock()
	s.nodes[s.known(n)] = n
	s.mu.Unlock()
	return n
}

// startSentinel starts a sentinel monitoring primary, with its own
// writable config file (sentinels rewrite it with what they learn), and
// stops it when t ends.
func (s *Sentinel) startSentinel(t testing.TB, path, primary string) *Server {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	host, p, _ := net.SplitHostPort(primary)
	m := s.MasterName
	text := strings.Join([]string{
		// Addresses stay IPs: no DNS lookups on the failover path.
		"sentinel resolve-hostnames no",
		// Announce the loopback address to the other sentinels and to
		// clients.
		"sentinel announce-ip 127.0.0.1",
		fmt.Sprintf("sentinel monitor %s %s %s 2", m, host, p),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", m, SentinelDownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", m, SentinelFailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", m),
		"",
	}, "\n")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if s.tls != nil {
		return startTLS(t, path, *s.tls, conf, "--sentinel", "--tls-replication", "yes")
	}
	return retryPorts(t, func(port int) (*Server, error) {
		return launch(path, dir, port, conf, "--sentinel")
	})
}

// ready reports why the sentinel at addr could not yet lead a failover to
// replica, or nil.
func (s *Sentinel) ready(addr, replica string) error {
	r, err := command(addr, "SENTINEL", "REPLICAS", s.MasterName)
	if err != nil {
		return err
	}
	replicas, _ := r.([]any)
	known := false
	for _, e := range replicas {
		f := fields(e)
		if net.JoinHostPort(f["ip"], f["port"]) == replica && f["flags"] == "slave" && f["master-link-status"] == "ok" {
			known = true
		}
	}
	if !known {
		return fmt.Errorf("it does not list %s as a healthy replica: %v", replica, replicas)
	}
	r, err = command(addr, "SENTINEL", "SENTINELS", s.MasterName)
	if err != nil {
		return err
	}
	if others, _ := r.([]any); len(others) != len(s.Addrs)-1 {
		return fmt.Errorf("it knows %d other sentinels, want %d", len(others), len(s.Addrs)-1)
	}
	return nil
}

// masterOf asks the sentinel at addr for the primary's address.
func (s *Sentinel) masterOf(addr string) (string, error) {
	r, err := command(addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
	if err != nil {
		return "", err
	}
	hp, ok := r.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME answered %v", addr, r)
	}
	return net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1])), nil
}

// logOnFailure logs, when t failed, the sentinels' output (their events:
// +sdown, +odown, +elected-leader, +switch-master). Their own cleanups
// have stopped them by then; Stop waits for that all the same, so that the
// log is complete and no longer written.
func (s *Sentinel) logOnFailure(t testing.TB) {
	if !t.Failed() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sn := range s.sentinels {
		sn.Stop()
		t.Logf("sentinel %s:\n%s", sn.Addr, sn.output())
	}
}

// isMaster reports why the data node the sentinels know as addr is not a
// reachable primary, or nil.
func (s *Sentinel) isMaster(addr string) error {
	s.mu.Lock()
	n := s.nodes[addr]
	s.mu.Unlock()
	if n == nil {
		return fmt.Errorf("%s is not a node this Sentinel started", addr)
	}
	r, err := command(n.Addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if s, _ := r.(string); !strings.Contains(s, "role:master") {
		return fmt.Errorf("%s is not a master yet", addr)
	}
	return nil
}

// fields returns the field-value pairs of a flat array reply (SENTINEL
// REPLICAS lists one per replica) as a map.
func fields(v any) map[string]string {
	a, _ := v.([]any)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		m[fmt.Sprint(a[i])] = fmt.Sprint(a[i+1])
	}
	return m
}
