package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Open connects to Redis at url with rueidis and returns a Store that
// closes the connection on Close. The URL takes every topology:
//
//	redis://[user:password@]host:port[/db]                 standalone, or a Cluster (detected)
//	redis://host1:port?addr=host2:port&addr=host3:port      several Cluster seed nodes
//	redis://host:26379?addr=host2:26379&master_set=mymaster  through Sentinel
//	rediss://...                                           TLS
//	unix:///path/to/redis.sock
//
// The URL's query options are those of rueidis.ParseURL (addr,
// client_cache, client_name, db, dial_timeout, master_set, max_retries,
// protocol, skip_verify, write_timeout) and, on a rediss:// URL, these:
//
//	tls_ca_file      PEM file of the CA certificates that verify the servers
//	                 (default: the system's roots)
//	tls_cert_file    PEM file of a client certificate (and its chain), for
//	tls_key_file     mutual TLS, and its private key: one needs the other
//	tls_server_name  the name every server's certificate must hold, also sent
//	                 as SNI (default: the host each connection dials)
//
// for example
//
//	rediss://user:pass@redis:6380/0?tls_ca_file=ca.pem&tls_cert_file=client.pem&tls_key_file=client-key.pem
//
// Any other option, an option given twice (addr apart), a value that
// rueidis would ignore (protocol other than 2 or 3, client_cache other
// than 0 or 1, max_retries other than 0), an empty TLS option or a TLS
// option (skip_verify too) on a URL without TLS is an error that names
// it; Open and CheckURL read the files, and their errors
// name the option and the file's problem, never the URL. On a Cluster the
// TLS options reach every node. Through Sentinel they reach the sentinels
// as well as the primary (rueidis.ParseURL alone leaves the sentinels'
// TLS unset, dialing them in plain text): sentinels with a tls-port and
// tls-replication yes name the nodes by their TLS ports. The URL's user
// and password are sent to the data nodes only.
//
// Through Sentinel, the store follows a failover on the sentinels' event
// and also asks them for the primary every 5 seconds, so a missed event
// costs at most that. Open fails when no server answers.
func Open(url string, opts ...Option) (*Store, error) {
	opt, err := parseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	c, err := newClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis store: connect: %w", err)
	}
	if err := waitSupported(c, opts); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis store: %w", err)
	}
	s := FromRueidis(c, opts...)
	s.close = c.Close
	return s, nil
}

// newClient connects a rueidis client with opt as the store needs it:
// without the client-side cache, which the store never reads through;
// always pipelining, so that a decision that times out leaves its
// connection open; and, through Sentinel, asking the sentinels for the
// primary every sentinelRefresh unless opt says otherwise.
//
// Without AlwaysPipelining rueidis sends a lone command on an idle
// connection synchronously, under a socket deadline that closes the
// connection when the command's deadline passes. With Redis more than half
// the store deadline away, the next decision then paid a new connection's
// handshake, a round trip, inside its own deadline, timed out in turn and
// closed that connection too: one slow answer became a new connection
// every few decisions and decisions that failed although Redis answered
// each within the deadline (TestTimeoutKeepsConnection). Pipelined, a
// timed-out command's reply is read and dropped when it comes, and a
// connection that answers nothing is closed by rueidis's keep-alive PING
// (after Dialer.KeepAlive + ConnWriteTimeout, 11s by default).
func newClient(opt rueidis.ClientOption) (rueidis.Client, error) {
	opt.DisableCache = true
	opt.AlwaysPipelining = true
	if opt.Sentinel.MasterSet != "" && opt.Sentinel.TopologyRefreshInterval == 0 {
		// Without it rueidis follows a failover only through the
		// +switch-master event; one missed event would keep every decision
		// on a demoted primary (failing with READONLY) until a restart.
		opt.Sentinel.TopologyRefreshInterval = sentinelRefresh
	}
	return rueidis.NewClient(opt)
}

// sentinelRefresh is how often a store opened through Sentinel asks the
// sentinels for the primary, besides following their failover events.
const sentinelRefresh = 5 * time.Second

// CheckURL reports whether url is a Redis URL Open accepts, without
// connecting: it returns the error Open would before connecting, reading
// the files the TLS options name. Its error never quotes the URL, which
// may hold a password.
func CheckURL(url string) error {
	_, err := parseURL(url)
	return err
}

// parseURL returns the rueidis options url describes: those of
// rueidis.ParseURL, then the TLS options (tls.go), with every query option
// checked (checkOptions). Its error never quotes the URL, which may hold a
// password: net/url's errors do, so only the cause inside them is kept.
func parseURL(url string) (rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		var uerr *neturl.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return opt, fmt.Errorf("invalid Redis URL: %w", err)
	}
	u, err := neturl.Parse(url) // rueidis parsed it: it parses
	if err != nil {
		return opt, errors.New("invalid Redis URL")
	}
	q, err := neturl.ParseQuery(u.RawQuery)
	if err != nil {
		return opt, fmt.Errorf("invalid Redis URL: query: %w", err)
	}
	if err := checkOptions(q); err != nil {
		return opt, fmt.Errorf("invalid Redis URL: %w", err)
	}
	if err := applyTLS(&opt, q); err != nil {
		return opt, fmt.Errorf("invalid Redis URL: %w", err)
	}
	return opt, nil
}

// FromRueidis returns a Store over a rueidis client the caller owns (and
// closes). A cluster client's Store splits decisions by slot (see
// WithCluster). Connect it with ClientOption.AlwaysPipelining, as Open
// does: otherwise a decision that times out on an idle connection closes
// it, and with Redis far away the next decisions time out in turn on new
// connections' handshakes.
func FromRueidis(c rueidis.Client, opts ...Option) *Store {
	if c.Mode() == rueidis.ClientModeCluster {
		opts = append([]Option{WithCluster()}, opts...)
	}
	return New(rueidisClient{c}, opts...)
}

// rueidisClient adapts a rueidis.Client to Client.
type rueidisClient struct{ c rueidis.Client }

func (r rueidisClient) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	cmd := r.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.ints(ctx, cmd)
}

func (r rueidisClient) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	cmd := r.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.ints(ctx, cmd)
}

// ints returns the reply, wrapping the errors the store acts on. rueidis
// returns TRYAGAIN for scripts, which it retries only when read-only. It
// follows ASK and MOVED itself, unless ClusterOption.MaxMovedRedirections
// stops it: then a cluster client returns the last ASK or MOVED, and the
// store sends the script again, as it does for go-redis. MOVED from any
// other client means it is not a cluster client, which retrying would not
// mend.
func (r rueidisClient) ints(ctx context.Context, cmd rueidis.Completed) ([]int64, error) {
	return r.check(r.c.Do(ctx, cmd).AsIntSlice())
}

// check returns a script's reply v and err, wrapping the errors the store
// acts on (see ints).
func (r rueidisClient) check(v []int64, err error) ([]int64, error) {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return v, err
	}
	_, ask := re.IsAsk()
	_, moved := re.IsMoved()
	switch {
	case re.IsNoScript():
		return nil, fmt.Errorf("%w: %w", ErrNoScript, err)
	case re.IsTryAgain(), ask, moved && r.c.Mode() == rueidis.ClientModeCluster:
		return nil, fmt.Errorf("%w: %w", ErrTryAgain, err)
	}
	return v, err
}

// Shards implements ShardLister: CLUSTER SHARDS, or CLUSTER SLOTS on a
// server before Redis 7.0, which lacks it.
func (r rueidisClient) Shards(ctx context.Context) ([]Shard, error) {
	v, err := r.c.Do(ctx, r.c.B().ClusterShards().Build()).ToArray()
	if re, ok := rueidis.IsRedisErr(err); ok && strings.Contains(strings.ToLower(re.Error()), "unknown subcommand") {
		v, err = r.c.Do(ctx, r.c.B().ClusterSlots().Build()).ToArray()
		if err != nil {
			return nil, err
		}
		return slotsShards(v)
	}
	if err != nil {
		return nil, err
	}
	shards := make([]Shard, 0, len(v))
	for _, m := range v {
		f, err := m.AsMap()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SHARDS: %w", err)
		}
		var sh Shard
		fslots, fnodes := f["slots"], f["nodes"]
		slots, _ := fslots.AsIntSlice()
		for i := 0; i+1 < len(slots); i += 2 {
			sh.Slots = append(sh.Slots, [2]int{int(slots[i]), int(slots[i+1])})
		}
		nodes, _ := fnodes.ToArray()
		for _, n := range nodes {
			node, err := n.AsMap()
			if err != nil {
				return nil, fmt.Errorf("CLUSTER SHARDS: %w", err)
			}
			str := func(k string) string {
				v := node[k]
				if i, err := v.AsInt64(); v.IsInt64() && err == nil {
					return strconv.FormatInt(i, 10)
				}
				s, _ := v.ToString()
				return s
			}
			sh.IDs = append(sh.IDs, str("id"))
			if str("role") == "master" {
				host := str("endpoint")
				if host == "" || host == "?" {
					host = str("ip")
				}
				sh.Master = net.JoinHostPort(host, str("port"))
			}
		}
		shards = append(shards, sh)
	}
	return shards, nil
}

// slotsShards returns the shards of a reply to CLUSTER SLOTS: each entry
// is a range of slots, its master (address and ID) and its replicas.
func slotsShards(v []rueidis.RedisMessage) ([]Shard, error) {
	byMaster := map[string]int{}
	var shards []Shard
	for _, e := range v {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: an entry of %d fields (%v)", len(f), err)
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
		}
		var sh Shard
		for i, n := range f[2:] {
			node, err := n.ToArray()
			if err != nil || len(node) < 2 {
				return nil, fmt.Errorf("CLUSTER SLOTS: a node of %d fields (%v)", len(node), err)
			}
			host, _ := node[0].ToString()
			port, _ := node[1].AsInt64()
			id := ""
			if len(node) > 2 {
				id, _ = node[2].ToString()
			}
			if i == 0 {
				sh.Master = net.JoinHostPort(host, strconv.FormatInt(port, 10))
			}
			sh.IDs = append(sh.IDs, id)
		}
		k, ok := byMaster[sh.Master]
		if !ok {
			k = len(shards)
			byMaster[sh.Master] = k
			shards = append(shards, Shard{Master: sh.Master, IDs: sh.IDs})
		}
		shards[k].Slots = append(shards[k].Slots, [2]int{int(lo), int(hi)})
	}
	return shards, nil
}

// EvalShaWait implements Waiter (see evalWait).
func (r rueidisClient) EvalShaWait(ctx context.Context, sha string, keys, args []string, replicas int, timeout time.Duration) ([]int64, int64, error) {
	cmd := r.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.intsWait(ctx, cmd, replicas, timeout)
}

// EvalWait implements Waiter.
func (r rueidisClient) EvalWait(ctx context.Context, script string, keys, args []string, replicas int, timeout time.Duration) ([]int64, int64, error) {
	cmd := r.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.intsWait(ctx, cmd, replicas, timeout)
}

// intsWait sends cmd and WAIT replicas timeout in one DoMulti. rueidis
// tags WAIT as blocking, so it sends both on one connection of its
// blocking pool, which no other caller shares meanwhile, in order: the
// WAIT counts the replicas that acknowledged cmd's writes. (Sent apart,
// through Do, the script would go on a shared pipelined connection and the
// WAIT on a pooled one, which wrote nothing.) A connection whose context
// ends during the WAIT is closed by rueidis, not reused while blocked. A
// client the caller built with ClientOption.ConnLifetime may resend the
// WAIT alone on another connection when the lifetime ends between the two
// (rueidis's errConnExpired recovery), where it would count nothing: do
// not combine it with WithWaitReplicas (Open never sets it).
func (r rueidisClient) intsWait(ctx context.Context, cmd rueidis.Completed, replicas int, timeout time.Duration) ([]int64, int64, error) {
	wait := r.c.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
	rs := r.c.DoMulti(ctx, cmd, wait)
	v, err := r.check(rs[0].AsIntSlice())
	if err != nil {
		return nil, 0, err
	}
	acked, err := rs[1].AsInt64()
	if err != nil {
		return nil, 0, fmt.Errorf("WAIT: %w", err)
	}
	return v, acked, nil
}

// waitSupported returns an error wrapping ErrWaitUnsupported when opts ask
// WithWaitReplicas of a store over c, a Cluster client: New would panic.
func waitSupported(c rueidis.Client, opts []Option) error {
	var probe Store
	for _, o := range opts {
		o(&probe)
	}
	if probe.wait.replicas > 0 && c.Mode() == rueidis.ClientModeCluster {
		return ErrWaitUnsupported
	}
	return nil
}
