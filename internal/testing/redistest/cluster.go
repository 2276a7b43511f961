package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// clusterSize is the number of masters of a Cluster; it has no replicas.
const clusterSize = 3

// Cluster is a Redis Cluster of three masters, each a redis-server on a
// free loopback port, sharing the 16384 slots. Its methods fail the test
// they are given on any error; they are safe for concurrent use, as each
// call opens its own connection.
type Cluster struct {
	// Addrs are the masters' host:port on 127.0.0.1.
	Addrs []string
	// TLSAddrs are the host:port of the masters' TLS ports, in the order
	// of Addrs, for a Cluster started with StartClusterTLS; else nil.
	TLSAddrs []string

	ids []string // node IDs, in the order of Addrs

	mu    sync.Mutex
	nodes []*clusterNode // in the order of Addrs
}

// clusterNode is one master's process and what it takes to start it again
// as the same node: its directory (nodes.conf), port and arguments (the
// cluster bus port, TLS).
type clusterNode struct {
	srv  *Server
	dir  string
	port int
	args []string
}

// StartCluster starts three cluster-enabled redis-servers for t, joins them
// with redis-cli --cluster create and waits until every node reports
// cluster_state:ok and all agree on which node owns every slot. The servers
// are stopped (by pid) when t ends. It fails t if redis-server or redis-cli is not installed or the cluster
// does not form.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, nil)
}

// StartClusterTLS is StartCluster with a TLS port on every master besides
// its plain one (Addrs, which the helpers use), serving a certificate of
// new TLSFiles, which it returns, and with the cluster bus over TLS
// (tls-cluster yes): a client on a TLS port learns the other masters' TLS
// ports.
func StartClusterTLS(t testing.TB) (*Cluster, TLSFiles) {
	t.Helper()
	files := NewTLSFiles(t)
	return startCluster(t, &files), files
}

// startCluster starts a Cluster, over TLS too when files is not nil.
func startCluster(t testing.TB, files *TLSFiles) *Cluster {
	t.Helper()
	server := Need(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli is not installed (it is not in PATH), and the Cluster tests need it: run `make test`, which installs it, or `sudo apt-get install -y redis-tools`")
	}
	c := &Cluster{}
	for range clusterSize {
		n := startClusterNode(t, server, files)
		c.nodes = append(c.nodes, n)
		c.Addrs = append(c.Addrs, n.srv.Addr)
		if files != nil {
			c.TLSAddrs = append(c.TLSAddrs, n.srv.TLSAddr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range c.Addrs {
		id, err := command(addr, "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", addr, err)
		}
		c.ids = append(c.ids, fmt.Sprint(id))
	}
	waitFor(t, time.Now().Add(30*time.Second), "the cluster to settle", c.agreed)
	return c
}

// startClusterNode starts one cluster-enabled redis-server in its own
// directory, and stops it when t ends. The cluster bus needs a second
// port; by default it is the client port + 10000, which overflows for the
// high ports the kernel hands out, so it gets a free port of its own.
// With files, the node has a TLS port too, and its bus runs over TLS.
func startClusterNode(t testing.TB, path string, files *TLSFiles) *clusterNode {
	t.Helper()
	node := &clusterNode{}
	node.srv = retryPorts(t, func(port int) (*Server, error) {
		n := 1 // the bus
		if files != nil {
			n = 2 // and TLS
		}
		ports, err := freePorts(port, n)
		if err != nil {
			return nil, err
		}
		dir := t.TempDir()
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
			"--cluster-port", strconv.Itoa(ports[0]),
		}
		tlsAddr := ""
		if files != nil {
			args = append(append(args, serverArgs(*files, ports[1])...), "--tls-cluster", "yes")
			tlsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
		}
		node.dir, node.port, node.args = dir, port, args
		return node.launch(path, tlsAddr)
	})
	return node
}

// launch starts the node's redis-server with its directory, port and
// arguments; tlsAddr is its TLS address, or "".
func (n *clusterNode) launch(path, tlsAddr string) (*Server, error) {
	s, err := launch(path, n.dir, n.port, "", n.args...)
	if err == nil {
		s.TLSAddr = tlsAddr
	}
	return s, err
}

// node returns the node at addr, failing t if there is none.
func (c *Cluster) node(t testing.TB, addr string) *clusterNode {
	t.Helper()
	i := slices.Index(c.Addrs, addr)
	if i < 0 {
		t.Fatalf("redistest: %s is not a node of the cluster %v", addr, c.Addrs)
	}
	return c.nodes[i]
}

// KillNode kills the master at addr (SIGKILL, by pid) and waits for it to
// exit. The cluster has no replicas: its slots are unserved until
// RestartNode.
func (c *Cluster) KillNode(t testing.TB, addr string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.node(t, addr).srv.Stop()
}

// Pid returns the process ID of the master at addr (its latest process,
// after RestartNode).
func (c *Cluster) Pid(t testing.TB, addr string) int {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.node(t, addr).srv.Pid()
}

// RestartNode starts the master at addr again, as the same node (its
// nodes.conf, ports and TLS) but empty, and stops it when t ends. It
// returns once the node answers PING, without waiting for the other nodes
// to see it back: a test measures that recovery.
func (c *Cluster) RestartNode(t testing.TB, addr string) {
	t.Helper()
	path := Need(t)
	c.mu.Lock()
	n := c.node(t, addr)
	var lastErr error
	started := false
	for range 50 { // the old process's ports may take a moment to be free
		s, err := n.launch(path, n.srv.TLSAddr)
		if err == nil {
			n.srv, started = s, true
			t.Cleanup(s.Stop)
			break
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	c.mu.Unlock()
	if !started {
		t.Fatalf("redistest: restart of cluster node %s: %v", addr, lastErr)
	}
}

// agreed returns why the cluster is not settled, or nil.
func (c *Cluster) agreed() error {
	var first []string
	for i, addr := range c.Addrs {
		info, err := command(addr, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		s := fmt.Sprint(info)
		for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", fmt.Sprintf("cluster_known_nodes:%d", len(c.Addrs))} {
			if !strings.Contains(s, want+"\r\n") {
				return fmt.Errorf("%s: CLUSTER INFO lacks %s", addr, want)
			}
		}
		slots, err := c.slots(addr)
		if err != nil {
			return err
		}
		if i == 0 {
			first = slots
		} else if !slices.Equal(slots, first) {
			return fmt.Errorf("%s and %s disagree on slots: %q and %q", c.Addrs[0], addr, first, slots)
		}
	}
	return nil
}

// slotRange is one entry of CLUSTER SLOTS: slots lo to hi (inclusive)
// are served by the master at owner.
type slotRange struct {
	lo, hi int64
	owner  string
}

// slotRanges returns the reply of node addr to CLUSTER SLOTS; an entry
// that is not of the documented form is an error.
func slotRanges(addr string) ([]slotRange, error) {
	reply, err := command(addr, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	ranges, _ := reply.([]any)
	out := make([]slotRange, 0, len(ranges))
	for _, r := range ranges {
		f, _ := r.([]any)
		if len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry %v", r)
		}
		lo, ok1 := f[0].(int64)
		hi, ok2 := f[1].(int64)
		master, _ := f[2].([]any)
		if !ok1 || !ok2 || len(master) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry %v", r)
		}
		out = append(out, slotRange{lo, hi, net.JoinHostPort(fmt.Sprint(master[0]), fmt.Sprint(master[1]))})
	}
	return out, nil
}

// slots returns node addr's CLUSTER SLOTS as sorted "start-end host:port"
// lines, checking that every owner is one of the cluster's nodes.
func (c *Cluster) slots(addr string) ([]string, error) {
	ranges, err := slotRanges(addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	var out []string
	for _, r := range ranges {
		if !slices.Contains(c.Addrs, r.owner) {
			return nil, fmt.Errorf("%s: CLUSTER SLOTS names owner %q, not a node (yet)", addr, r.owner)
		}
		out = append(out, fmt.Sprintf("%d-%d %s", r.lo, r.hi, r.owner))
	}
	slices.Sort(out)
	return out, nil
}

// KeySlot returns the hash slot of key, as the cluster computes it
// (CLUSTER KEYSLOT).
func (c *Cluster) KeySlot(t testing.TB, key string) int {
	t.Helper()
	n, ok := c.Do(t, c.Addrs[0], "CLUSTER", "KEYSLOT", key).(int64)
	if !ok {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q did not answer an integer", key)
	}
	return int(n)
}

// Owner returns the address of the master that serves slot. It asks every
// node and fails t unless they all agree.
func (c *Cluster) Owner(t testing.TB, slot int) string {
	t.Helper()
	owner := ""
	for _, addr := range c.Addrs {
		ranges, err := slotRanges(addr)
		if err != nil {
			t.Fatalf("redistest: node %s: %v", addr, err)
		}
		found := ""
		for _, r := range ranges {
			if int64(slot) >= r.lo && int64(slot) <= r.hi {
				found = r.owner
			}
		}
		if found == "" {
			t.Fatalf("redistest: node %s knows no owner of slot %d", addr, slot)
		}
		if owner != "" && found != owner {
			t.Fatalf("redistest: nodes disagree on the owner of slot %d: %s and %s", slot, owner, found)
		}
		owner = found
	}
	return owner
}

// Do sends one command to the node at addr and returns its reply: a string
// (simple or bulk), an int64, a []any, or nil. It fails t on an error
// reply or a connection error.
func (c *Cluster) Do(t testing.TB, addr string, args ...string) any {
	t.Helper()
	reply, err := command(addr, args...)
	if err != nil {
		t.Fatalf("redistest: %s on %s: %v", strings.Join(args, " "), addr, err)
	}
	return reply
}

// CountKeysInSlot returns how many keys of slot the node at addr holds.
func (c *Cluster) CountKeysInSlot(t testing.TB, addr string, slot int) int {
	t.Helper()
	n, _ := c.Do(t, addr, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)).(int64)
	return int(n)
}

// id returns the node ID of the master at addr.
func (c *Cluster) id(t testing.TB, addr string) string {
	t.Helper()
	i := slices.Index(c.Addrs, addr)
	if i < 0 {
		t.Fatalf("redistest: %s is not a node of the cluster %v", addr, c.Addrs)
	}
	return c.ids[i]
}

// Migration is a slot on its way from one master to another. Between
// BeginMigration and Finish the source serves the keys it still holds and
// redirects clients with ASK for the others; a command on several keys of
// which only some have moved gets TRYAGAIN.
type Migration struct {
	// Slot is the slot being moved.
	Slot int
	// From and To are the addresses of the source and the target master.
	From, To string

	c              *Cluster
	fromID, toID   string
	toHost, toPort string
}

// BeginMigration marks slot IMPORTING on the master at to and MIGRATING on
// its owner, and returns the Migration. No key moves yet.
func (c *Cluster) BeginMigration(t testing.TB, slot int, to string) *Migration {
	t.Helper()
	from := c.Owner(t, slot)
	if from == to {
		t.Fatalf("redistest: slot %d already lives on %s", slot, to)
	}
	m := &Migration{Slot: slot, From: from, To: to, c: c, fromID: c.id(t, from), toID: c.id(t, to)}
	m.toHost, m.toPort, _ = net.SplitHostPort(to)
	s := strconv.Itoa(slot)
	c.Do(t, to, "CLUSTER", "SETSLOT", s, "IMPORTING", m.fromID)
	c.Do(t, from, "CLUSTER", "SETSLOT", s, "MIGRATING", m.toID)
	return m
}

// MoveKeys moves every key of the slot from the source to the target, at
// most batch keys per MIGRATE (each MIGRATE is atomic), and returns how
// many it moved.
func (m *Migration) MoveKeys(t testing.TB, batch int) int {
	t.Helper()
	moved := 0
	for {
		reply := m.c.Do(t, m.From, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(m.Slot), strconv.Itoa(batch))
		keys, _ := reply.([]any)
		if len(keys) == 0 {
			return moved
		}
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = fmt.Sprint(k)
		}
		// NOKEY: they expired meanwhile, which is not an error here.
		if reply := m.migrate(t, names); reply != "OK" && reply != "NOKEY" {
			t.Fatalf("redistest: MIGRATE of %q from %s to %s: %v", names, m.From, m.To, reply)
		}
		moved += len(keys)
	}
}

// Move moves the named keys of the slot from the source to the target in
// one atomic MIGRATE, leaving the slot's other keys where they are: a test
// can hold a multi-key command's keys split between the two masters.
func (m *Migration) Move(t testing.TB, keys ...string) {
	t.Helper()
	if len(keys) == 0 {
		return
	}
	if reply := m.migrate(t, keys); reply != "OK" {
		t.Fatalf("redistest: MIGRATE of %q from %s to %s: %v", keys, m.From, m.To, reply)
	}
}

// migrate sends MIGRATE for keys to the source and returns its reply.
func (m *Migration) migrate(t testing.TB, keys []string) any {
	t.Helper()
	args := append([]string{"MIGRATE", m.toHost, m.toPort, "", "0", "10000", "KEYS"}, keys...)
	return m.c.Do(t, m.From, args...)
}

// Finish assigns the slot to the target on every master, target first and
// then source as Redis recommends, which ends the migration: from then on
// the source answers MOVED.
func (m *Migration) Finish(t testing.TB) {
	t.Helper()
	s := strconv.Itoa(m.Slot)
	order := []string{m.To, m.From}
	for _, addr := range m.c.Addrs {
		if addr != m.To && addr != m.From {
			order = append(order, addr)
		}
	}
	for _, addr := range order {
		m.c.Do(t, addr, "CLUSTER", "SETSLOT", s, "NODE", m.toID)
	}
	if got := m.c.Owner(t, m.Slot); got != m.To {
		t.Fatalf("redistest: after migrating slot %d to %s, its owner is %s", m.Slot, m.To, got)
	}
}
