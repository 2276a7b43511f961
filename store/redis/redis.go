// Package redis is a sluice.Store that keeps its state in Redis, so that
// every replica of a service enforces one shared limit: 100 per minute means
// 100 per minute whether 1 or 40 replicas serve the traffic.
//
// Each decision is one atomic Lua script and one round trip, whatever the
// number of limits, unless its parts' keys lie in different Cluster slots
// (see "Stacked decisions on a Cluster"); concurrent decisions share one
// script call (see "Coalescing"). Each algorithm's Lua lives in its
// own file under lua/ and mirrors the Go function in internal/algo that
// the memory store runs, so both stores give identical Results. The
// scripts are loaded once and run by SHA; when the server answers NOSCRIPT
// (after a restart or a SCRIPT FLUSH) the store sends the source and
// carries on.
//
// Time comes from the Redis server's TIME, so replicas whose clocks disagree
// still enforce one limit, unless the request carries its own time (tests).
//
// # Keys
//
// The state of a client key under a limit lives at
//
//	<prefix>:{<client key>}<algorithm letter><period>[:<name>]
//
// with one Redis key per limit: sluice:{client-123}f1m for a fixed window
// of a minute, sluice:{client-123}g1500ms:api for a GCRA limit named "api"
// of 1.5 seconds. The letters are f fixed_window, w sliding_window, l
// sliding_log, t token_bucket and g gcra; the period is a whole number of
// the largest unit that divides it (d, h, m, s, ms, us). A concurrency
// limit's key has the letter c and no period (its lease is no part of
// its identity): sluice:{client-123}c:exports. The client key is
// the Redis Cluster hash tag, so all the keys of one client key land in
// one slot (a decision over several client keys: see "Stacked decisions on
// a Cluster"); '{', '}' and '%' in it and in the prefix are
// percent-encoded, the empty key becomes %0, and client keys longer than
// 128 bytes are replaced by a hash so that a hostile key cannot bloat
// memory. The key is binary safe, and distinct client keys and limits
// give distinct keys: the prefix ends at the first '{', the tag at the
// first '}', and the rest reads back as one limit identity. Every key
// expires as soon as its state is equivalent to none (the window ended,
// the bucket is full).
//
// The rest of the key is the limit's Identity, without its Limit or Burst,
// so that a limit raised or lowered keeps every client's state: each
// script reads what other numbers left, and token_bucket and gcra store
// the interval their debt is measured in, to convert it.
//
// Keys written for the policy engine (sluice serve, the middleware, the
// proxy) hold its namespaced client key (package policy): the rule
// login's limit for the address 192.0.2.1 is
// sluice:{ip:192.0.2.1}w1m:login-1m, a header or query value v is k:v,
// the global key global. Some keys are the store's own, which no client
// key can produce: <prefix>:{%ready}f1s (Ready) and, on a Cluster, one
// <prefix>:{%ready<n>}f1s per master, and <prefix>:{%fleet}:replicas
// (Heartbeat, a sorted set of replica names scored by the millisecond
// their heartbeat ends).
//
// # Values
//
// A value is written by the scripts in lua/ only. Their KEYS and ARGV,
// replies, and the type, fields, units and TTL of what each algorithm
// stores are specified in lua/README.md
// (https://github.com/sluice-go/sluice/blob/main/store/redis/lua/README.md),
// which a test keeps true to a real server.
//
// While a Cluster migrates a slot, decisions on its keys keep working: the
// clients follow ASK and MOVED, the store reloads its scripts on the new
// master, and a decision under several limits that meets TRYAGAIN (its
// keys split between the two masters) is sent again, which is safe because
// Redis did not run it.
//
// # Coalescing
//
// Redis spends much of a decision's CPU around the script rather than in
// it, so a Store sends concurrent decisions together: while four script
// calls of a lane are in flight, the decisions that arrive wait, and when
// a call returns, those waiting (up to WithBatch's maximum) go as one
// EVALSHA of lua/batch.lua. It decides them one after another in arrival
// order, each all or nothing exactly as take.lua decides one alone, each
// seeing what those before it consumed, under one TIME for those without
// their own Now. A decision that finds fewer than four calls in flight is
// sent at once, alone: coalescing adds no wait when nobody else waits. A
// decision with a deadline waits for a call to return a tenth of the time
// it had left at most: then those waiting go as one more call, so that
// with Redis far away (a round trip of half the deadline or more) a
// queued decision does not wait two round trips and miss its deadline. A
// batch only orders decisions that were concurrent, so every Result is
// one that some sequential order of the callers would give: limits stay
// exact.
//
// Refunds and charges (a reservation's settle) coalesce
// in the same lanes. Those that wait go with the decisions of their
// batch: the refunds of one instant (those without their own Now share
// the server's TIME) in the decisions' own call (lua/refund_first.lua
// before lua/batch.lua), the others as one call of refund.lua or
// charge.lua per instant, sent at once beside it. Refunds and charges
// give back and charge key after key, deciding nothing, so that a settle
// costs no more than a decision at any concurrency.
//
// A lane is what one script may touch: the server (standalone, Sentinel),
// or one hash slot on a Cluster. A store sharded on the client side
// (WithSharding) does not coalesce, nor do decisions split over slots,
// nor peeks (Peek), which go to Redis alone.
//
// A decision whose context ends while it waits leaves the queue, not
// taken, and Take returns the context's error. Once its batch is sent it
// may have been taken, as any decision whose context ends during its round
// trip: Take returns the context's error at once, and the call goes on
// for the others, bounded by the latest of their deadlines (none if one
// has none). An error of the call (the server unreachable or refusing) is
// the error of every decision in it; NOSCRIPT gets the source sent, as for
// one decision; a batch that a Cluster refuses during a slot migration
// (TRYAGAIN, ASK), which Redis did not run, is sent again decision by
// decision, each following ASK or retrying as alone. A batch script that
// Redis fails partway (an out-of-memory refusal) keeps what the decisions
// before the failure consumed, as a multi-limit decision failing after its
// first write does: a failure may under-admit, never over-admit.
//
// # Replicated decisions
//
// Redis replicates asynchronously: a primary answers a script before its
// replicas have the script's writes. When a failover promotes a replica
// (Sentinel), the decisions the old primary admitted but had not yet sent
// vanish, and their clients may be admitted again: over-admission, by at
// most the admissions the old primary acknowledged and had not
// replicated. WithWaitReplicas(n, timeout) closes that gap. A decision
// that consumes is followed on its connection, in the same round trip, by
// WAIT n timeout, and answered once n replicas have acknowledged every
// write the connection made; a coalesced batch sends one WAIT after its
// script, for all its decisions.
//
// What it promises: every decision the store answers as admitted (Take
// returns no error) was, before the answer, in the memory of n replicas,
// so a failover that promotes one of them loses none of them. With one
// replica, or n as many as the replicas, that is any replica Sentinel can
// promote. With n below the replicas it is the one Sentinel picks when
// replica-priority is the same on all of them and one that acknowledged
// is reachable: Sentinel promotes the replica with the largest
// replication offset among those of the best priority. WAIT counts a
// replica's receipt, not its disk, and guards nothing against the
// failure of n replicas and the primary together.
//
// When fewer than n replicas acknowledge within the timeout, the
// decision has consumed on the primary already: Take returns an error
// wrapping ErrNotReplicated, and the Limiter's error policy answers (allow,
// deny, local), as it answers any store failure. The consumption stays on
// the primary and counts against the client if the primary survives
// (under-admission, never over-admission). So a primary whose replicas
// are all gone fails every admitted decision, as a dead primary does: the
// setting trades availability for the promise. A denial, or a decision
// of cost 0 (a breaker's probe), wrote nothing a failover could lose: it
// is answered whatever WAIT says, and a decision alone of cost 0 sends no
// WAIT (so a probe succeeds while replicas do not acknowledge, and the
// breaker closes until the next decisions fail). Peek, refunds, Reset
// and Heartbeat never wait. Ready consumes, so it waits and fails with
// ErrNotReplicated too.
//
// The timeout is Redis's (whole milliseconds, checked on its event loop)
// and must leave room under the store timeout, or the store timeout cuts
// the decision first. rueidis sends each script and its WAIT on a
// connection of its blocking pool, one per concurrent call: with
// coalescing at most four per server (see "Coalescing"). WAIT is refused
// on a Cluster and a Ring (see WithWaitReplicas).
//
// # Stacked decisions on a Cluster
//
// A request of several parts (a per-address rule and a per-API-key rule)
// has one hash tag per client key, so on a Redis Cluster its keys may lie
// in different slots, on different masters, where no one script can reach
// them all (Redis answers CROSSSLOT). On standalone Redis and through
// Sentinel every decision stays one atomic script. A Store splits a
// decision only when it is on a Cluster: Open and FromRueidis ask the
// rueidis client (Mode), package goredis sets it for a ClusterClient, and a
// Store built with New over another cluster client needs WithCluster. A
// go-redis Ring, which shards keys by hash tag on the client side, splits
// a decision by client key in the same way (WithSharding, which package
// goredis sets for a Ring).
//
// The store then groups the limits by slot (the CRC16 of the client key,
// as Redis computes it): parts whose keys share a slot run in one atomic
// script, and the groups run one after another, in the order of their
// first part. If every group admits, the request is admitted. When a group
// denies, the store gives back what the groups before it consumed (a
// refund script per group) and answers the denial: the denying group's
// Results as its script decided them, the earlier groups' state after the
// refund, and the later groups' state read without consuming; a group
// whose refund failed reports what it took, and a later group whose state
// could not be read reports Allowed with Remaining 0. When a group's script
// fails, the earlier groups are refunded and Take returns the error.
//
// Refunds are exact, with one bounded exception: each key's state is as if
// the request had never been taken. fixed_window takes cost back only in
// the window it was counted in (a later window never counted it);
// sliding_window from that window, current or previous; sliding_log
// removes the members the take added at its instant, which is why a take
// reports the instant it used (the server's TIME, or the request's Now).
// token_bucket and gcra add back the cost, less what the time since the
// take would have refilled beyond a full bucket. That is exact unless,
// between take and refund, the bucket came within the cost of full and
// another request took from it: then it gives back less, by at most the
// refill of that time, a few milliseconds (lua/refund.lua has the proof). A refund never gives back more than the
// take consumed: where the state was reset or replaced meanwhile, or the
// take counted in a window ahead of its clock (a clock that stepped back),
// it gives back nothing, or less.
//
// So a split decision never admits more than any limit allows. What it
// costs: between a group's take and its refund (a round trip or two),
// other requests on that group's keys see the consumption and may be
// denied although they would fit (under-admission: TestCluster/Stacked
// logs how many; with the most specific part first and no refill, none;
// with the global part first and its limit a little above the binding
// one, about one in ten); a refund that fails (its master is down) leaves
// the consumption until the limit recovers;
// the refunds and reads of a denial add a round trip, run at once over
// their masters, and outlive the caller's context for up to a second so
// that a canceled request does not leave its consumption behind. Putting
// first the part most likely to deny keeps denials cheap.
//
// # Nodes
//
// A Store is a sluice.Noder, so that a Limiter keeps one circuit breaker
// per node and a node that fails degrades the decisions of its own keys
// only. On a Cluster a node is a shard, a master and its replicas: the
// Store reads which shard serves each slot (CLUSTER SHARDS, or CLUSTER
// SLOTS before Redis 7.0, through the Client's ShardLister) when it is
// made, then every 5 seconds while decisions come and at most every 250ms
// while some fail, always in the background: no decision waits for it,
// and until the first map is read every key is node 0, one breaker for
// the whole Cluster. A shard keeps its number while any of its nodes
// stays in it, so its breaker survives a replica taking over from its
// master; a slot moved to another shard takes its keys to that shard's
// breaker once the map is read again. A decision that fails on a master
// fails with a *sluice.NodeError naming it (a decision split over slots:
// the first master that failed, and those that answered before it), so
// that the failure is charged to that master's breaker alone. A server
// alone, through Sentinel (the breaker follows a failover: the node is
// the primary, whichever it is) or sharded by the client (WithSharding, a
// go-redis Ring, whose key-to-shard map go-redis does not expose) is one
// node, and so is a Cluster whose Client is no ShardLister.
//
// # Readiness and permissions
//
// Ready runs a decision, with a write, on a key reserved for it (see
// Ready), on every master of a Cluster, so that it fails wherever
// decisions fail; Ping only runs a script that touches nothing. A Redis ACL user needs EVALSHA and EVAL
// (sent once per script after a restart or SCRIPT FLUSH; the store never
// sends SCRIPT), the commands the scripts run (GET, SET, INCRBY, DEL,
// PEXPIRE, TIME, for sliding_log and concurrency ZADD, ZCOUNT, ZRANGE,
// ZRANGEBYSCORE, ZREMRANGEBYSCORE and ZREM, the last in refunds only, for
// concurrency ZCARD in decisions and ZSCORE in renewals, and for Heartbeat
// ZADD, ZREMRANGEBYSCORE and ZCARD), WAIT with WithWaitReplicas, and PING, which
// rueidis sends on idle connections; SELECT for a database other than 0,
// CLUSTER SHARDS and CLUSTER SLOTS on a Cluster, ROLE on a primary reached
// through Sentinel. Store.TTL runs PTTL. Peek (lua/peek.lua) runs only
// reading commands that decisions run too (GET, TIME, ZCOUNT, ZRANGE,
// ZRANGEBYSCORE) and writes nothing.
//
// # Clients
//
// Open connects with github.com/redis/rueidis (auto-pipelining) to a
// standalone server, a Cluster (detected) or through Sentinel, with TLS
// and mutual TLS (see Open). FromRueidis
// wraps a rueidis client you already have; package store/redis/goredis
// wraps a github.com/redis/go-redis/v9 client; New takes any Client.
//
// The Redis guide is docs/redis.md (https://github.com/sluice-go/sluice/blob/main/docs/redis.md).
package redis

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/longkey"
)

// Client is what the Store needs of a Redis client: running Lua scripts.
// Adapters for rueidis (FromRueidis) and go-redis (package goredis) are
// provided; another client fits with a few lines. A Client must not send
// a script again after a failure that may have come after Redis ran it
// (a connection lost before the reply): that charges the decision twice
// (package goredis, "Retries").
type Client interface {
	// EvalSha runs the cached script with the given SHA-1 and returns its
	// array-of-integers reply. When the server does not have the script it
	// must return an error wrapping ErrNoScript; when a Cluster answers
	// TRYAGAIN or a redirection that the client did not follow, an error
	// wrapping ErrTryAgain.
	EvalSha(ctx context.Context, sha1 string, keys, args []string) ([]int64, error)
	// Eval runs script and returns its array-of-integers reply; it wraps
	// ErrTryAgain as EvalSha does.
	Eval(ctx context.Context, script string, keys, args []string) ([]int64, error)
}

// ErrNoScript is wrapped by Client.EvalSha errors when the server answers
// NOSCRIPT.
var ErrNoScript = errors.New("NOSCRIPT")

// ErrTryAgain is wrapped by Client errors when a Redis Cluster refused to
// run a script because its slot is being migrated: TRYAGAIN (the keys are
// not all on one master), or a redirection the client gave up following
// (ASK; MOVED too from a cluster client, which refreshes its slot map). The
// script did not run, so the Store sends it again until the migration lets
// it run, for up to 2 seconds or until the context ends.
var ErrTryAgain = errors.New("cluster slot migrating, script not run")

//go:embed lua/*.lua
var luaFiles embed.FS

// script is a Lua script and its SHA-1.
type script struct{ src, sha string }

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Each decision runs a script made of common.lua, window.lua and
// bucket.lua where its algorithms need them, the files of the algorithms it
// serves, a generated table of those algorithms and take.lua.
// A decision whose limits share one algorithm runs that algorithm's script,
// the cheapest; a decision mixing algorithms runs the script of all six
// (the five rate algorithms and concurrency), so that it is still one
// atomic call. A refund (of a decision split over Cluster slots, or a
// settle) runs refund.lua after all six, then
// refund_main.lua (or, in a batch of decisions, refund_first.lua and
// batch.lua), a charge charge.lua, a slot's renewal renew.lua.
var (
	// algScripts holds each algorithm's script by its algo.Code, under
	// which the default ("") is token_bucket's.
	algScripts   = byAlgorithm("take")
	allScript    = compose("take", algorithms...)
	refundScript = compose("refund+refund_main", algorithms...)
	// refundBatch runs a coalesced batch of decisions and refunds
	// (coalesce.go's send).
	refundBatch  = compose("refund+refund_first+batch", algorithms...)
	chargeScript = compose("charge", algorithms...)
	renewScript  = compose("renew", algorithms...)
)

// algorithms are those the scripts serve: the rate algorithms and
// Concurrency.
var algorithms = slices.Concat(sluice.Algorithms, []sluice.Algorithm{sluice.Concurrency})

// byAlgorithm returns the script of main over each algorithm alone, by
// its algo.Code.
func byAlgorithm(main string) map[string]script {
	m := make(map[string]script, len(algorithms))
	for _, a := range algorithms {
		m[algo.Code(a)] = compose(main, a)
	}
	return m
}

// compose builds the script that runs main (take, batch, refund, or
// "peek+take": the files named, joined by +, in order) over algorithms.
func compose(main string, algorithms ...sluice.Algorithm) script {
	read := func(name string) string {
		src, err := luaFiles.ReadFile("lua/" + name + ".lua")
		if err != nil {
			panic(err) // embedded at build time: cannot happen
		}
		return string(src) + "\n"
	}
	var b strings.Builder
	b.WriteString(read("common"))
	// The helpers of windows and of buckets, where an algorithm needs them:
	// each function a script defines costs every run of it a closure.
	if slices.ContainsFunc(algorithms, isWindow) {
		b.WriteString(read("window"))
	}
	if slices.ContainsFunc(algorithms, isBucket) {
		b.WriteString(read("bucket"))
	}
	table := "local algorithms = {\n"
	for _, a := range algorithms {
		b.WriteString(read(string(a)))
		table += fmt.Sprintf("  %s = {%s, %s_write},\n", algo.Code(a), a, a)
	}
	b.WriteString(table + "}\n")
	for _, m := range strings.Split(main, "+") {
		b.WriteString(read(m))
	}
	return newScript(b.String())
}

// isWindow reports whether a counts requests in windows, isBucket whether
// it is a token bucket: the algorithms that share window.lua, and
// bucket.lua.
func isWindow(a sluice.Algorithm) bool {
	return a == sluice.FixedWindow || a == sluice.SlidingWindow
}

func isBucket(a sluice.Algorithm) bool {
	return a == "" || a == sluice.TokenBucket || a == sluice.GCRA
}

// scriptFor returns the script for a decision under limits. Algorithms
// are compared as the script sees them (algo.Code), so that a limit that
// leaves the algorithm to the default and one that names token_bucket
// share token_bucket's script.
func scriptFor(limits []sluice.Limit) script {
	code := algo.Code(limits[0].Algorithm)
	for _, l := range limits[1:] {
		if algo.Code(l.Algorithm) != code {
			return allScript
		}
	}
	return algScripts[code]
}

var (
	resetScript = newScript("return {redis.call('DEL', unpack(KEYS))}")
	ttlScript   = newScript("return {redis.call('PTTL', KEYS[1])}")
	pingScript  = newScript("return {1}")
)

// Store is a sluice.Store over Redis. It is safe for concurrent use.
type Store struct {
	client Client
	prefix string
	split  splitMode  // how decisions over several client keys are split (stack.go)
	batch  int        // the most decisions per script call (WithBatch)
	co     *coalescer // nil: no coalescing (coalesce.go)
	topo   *topology  // a Cluster's shards; nil: one node (nodes.go)
	wait   waitSpec   // WithWaitReplicas (wait.go)
	close  func()
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the first part of every key (default "sluice"), so that
// stores sharing a server keep apart. '%', '{' and '}' in p are
// percent-encoded, so that the client key stays the hash tag of every key;
// p is otherwise used whole, however long. WithPrefix panics if p is
// empty: keys would start with ':' where the default was meant or a
// prefix was forgotten.
func WithPrefix(p string) Option {
	if p == "" {
		panic("redis store: WithPrefix: empty prefix")
	}
	p = percentEncode(p)
	return func(s *Store) { s.prefix = p }
}

// WithSharding tells a Store built with New that its Client spreads keys
// over several servers by their hash tag, on the client side, as a
// go-redis Ring does: a decision whose parts have different client keys
// is then split by client key, as on a Cluster, so that each key is
// decided on the server it lives on. Package goredis sets it for a Ring.
func WithSharding() Option {
	return func(s *Store) { s.split = byTag }
}

// WithCluster tells a Store built with New that its Client talks to a
// Redis Cluster, so that a decision whose parts' keys lie in different
// slots is split by slot (see "Stacked decisions on a Cluster") instead of
// failing with CROSSSLOT. Open and FromRueidis detect a Cluster, and
// package goredis sets it for a go-redis ClusterClient.
func WithCluster() Option {
	return func(s *Store) { s.split = bySlot }
}

// New returns a Store that runs its scripts through c. It panics when
// WithWaitReplicas cannot be honored over c (see WithWaitReplicas).
func New(c Client, opts ...Option) *Store {
	s := &Store{client: c, prefix: "sluice", batch: DefaultBatch}
	for _, o := range opts {
		o(s)
	}
	s.checkWait()
	s.co = newCoalescer(s)
	s.topo = newTopology(s)
	return s
}

// Close releases the connections the Store opened (Open). It does nothing
// for a Store over a client that the caller passed in.
func (s *Store) Close() {
	if s.close != nil {
		s.close()
	}
}

// Take implements sluice.Store: one script run, one round trip, over the
// keys of every part; on a Cluster, one per slot (see "Stacked decisions
// on a Cluster"). Concurrent decisions may share one script call (see
// "Coalescing" and WithBatch).
func (s *Store) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	return s.takeAt(ctx, req, nil)
}

// takeAt is Take, and when at is not nil (of req.Len()), fills it with
// the instant each limit was decided at (settle.go).
func (s *Store) takeAt(ctx context.Context, req sluice.Request, at []time.Time) ([]sluice.Result, error) {
	if err := req.CheckSlot(); err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	if s.topo != nil {
		s.topo.tick()
	}
	var one group // a decision of one part, most of them: no grouping to do
	g := &one
	if len(req.Parts) == 1 {
		one = s.partGroup(req.Parts[0], req.Slot)
	} else if gs := s.groups(req); len(gs) > 1 {
		return s.takeStacked(ctx, clockArg(req.Now), gs, req.Len(), at)
	} else {
		g = gs[0]
	}
	var t taken
	var err error
	if s.co != nil {
		t, err = s.co.take(ctx, clockArg(req.Now), g)
	} else {
		t, err = s.take(ctx, clockArg(req.Now), g, false)
	}
	if err != nil {
		return nil, s.failed(g, nil, err)
	}
	for i := range at {
		at[i] = time.UnixMicro(t.now).UTC()
	}
	return t.results, nil
}

// clockArg is the scripts' now argument: now in µs, or "" for the
// server's clock.
func clockArg(now time.Time) string {
	if now.IsZero() {
		return ""
	}
	return strconv.FormatInt(now.UnixMicro(), 10)
}

// taken is one run of take.lua over a group: its Results, in the group's
// order, and the now it decided at (µs).
type taken struct {
	results []sluice.Result
	now     int64
	err     error // in a batch that ran, this decision's own failure (ErrNotReplicated)
}

// take runs take.lua over the limits of g at now (clockArg), each with its
// part's cost, or with cost 0 when peek is set (the state, consuming
// nothing).
func (s *Store) take(ctx context.Context, now string, g *group, peek bool) (taken, error) {
	if s.waits(g, peek) {
		return s.takeWait(ctx, now, g)
	}
	return s.runGroup(ctx, scriptFor(g.limits), now, g, peek)
}

// runGroup runs sc, a script of take.lua's arguments and reply (take.lua,
// or take.lua made read only by peek.lua), over the limits of g at now, each with its part's cost, or
// with cost 0 when zero is set.
func (s *Store) runGroup(ctx context.Context, sc script, now string, g *group, zero bool) (taken, error) {
	reply, err := s.run(ctx, sc, g.keys, groupArgs(now, g, zero))
	if err != nil {
		return taken{}, err
	}
	return groupTaken(g, reply)
}

// groupArgs returns the arguments of take.lua over the limits of g at now,
// each with its part's cost, or with cost 0 when zero is set.
func groupArgs(now string, g *group, zero bool) []string {
	args := make([]string, 1, 1+4*len(g.limits))
	args[0] = now
	for i, l := range g.limits {
		cost := g.costOf(i)
		if zero {
			cost = 0
		}
		args = appendParams(args, l, g.costArg(i, cost))
	}
	return args
}

// groupTaken reads take.lua's reply over the limits of g.
func groupTaken(g *group, reply []int64) (taken, error) {
	rs, err := results(g.limits, reply, 1)
	if err != nil {
		return taken{}, err
	}
	return taken{results: rs, now: reply[len(reply)-1]}, nil
}

// appendParams appends to args what the scripts take for limit l: its
// algorithm code, its two parameters and cost (group.costArg).
func appendParams(args []string, l sluice.Limit, cost string) []string {
	p1, p2 := algo.Params(l)
	return append(args, algo.Code(l.Algorithm), strconv.FormatInt(p1, 10), strconv.FormatInt(p2, 10), cost)
}

// results reads the four integers per limit of a script's reply, followed
// by extra integers.
func results(limits []sluice.Limit, reply []int64, extra int) ([]sluice.Result, error) {
	if want := 4*len(limits) + extra; len(reply) != want {
		return nil, fmt.Errorf("script replied %d integers, want %d", len(reply), want)
	}
	rs := make([]sluice.Result, len(limits))
	for i, l := range limits {
		v := reply[4*i : 4*i+4]
		rs[i] = sluice.Result{
			Allowed:    v[0] == 1,
			Limit:      l.Capacity(),
			Remaining:  int(v[1]),
			ResetAfter: time.Duration(v[2]) * time.Microsecond,
			RetryAfter: time.Duration(v[3]) * time.Microsecond,
		}
	}
	return rs, nil
}

// Reset implements sluice.Store.
func (s *Store) Reset(ctx context.Context, key string, limits ...sluice.Limit) error {
	if len(limits) == 0 {
		return nil
	}
	if _, err := s.run(ctx, resetScript, s.keys(key, limits), nil); err != nil {
		return fmt.Errorf("redis store: reset: %w", err)
	}
	return nil
}

// Ping reports whether the server answers and runs scripts. The script
// it runs touches no key, so Ping passes where decisions fail (a user
// without the permission to write, a read-only replica): a readiness probe
// wants Ready.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.run(ctx, pingScript, nil, nil); err != nil {
		return fmt.Errorf("redis store: ping: %w", err)
	}
	return nil
}

// TTL returns how long the state of key under l will live in Redis if
// nothing else happens, or 0 when there is none.
func (s *Store) TTL(ctx context.Context, key string, l sluice.Limit) (time.Duration, error) {
	reply, err := s.run(ctx, ttlScript, []string{s.Key(key, l)}, nil)
	if err != nil {
		return 0, fmt.Errorf("redis store: ttl: %w", err)
	}
	if len(reply) != 1 || reply[0] < 0 {
		return 0, nil
	}
	return time.Duration(reply[0]) * time.Millisecond, nil
}

// Key returns the Redis key that holds the state of key under l.
func (s *Store) Key(key string, l sluice.Limit) string {
	return s.keys(key, []sluice.Limit{l})[0]
}

// keys returns the Redis keys that hold the state of key under each of
// limits, encoding key (escape) once for all of them.
func (s *Store) keys(key string, limits []sluice.Limit) []string {
	var buf [128]byte // most keys: built on the stack, one string each
	b := append(buf[:0], s.prefix...)
	b = append(b, ":{"...)
	b = append(b, escape(key)...)
	b = append(b, '}')
	base := len(b)
	keys := make([]string, len(limits))
	for i, l := range limits {
		b = algo.AppendID(b[:base], l)
		keys[i] = string(b)
	}
	return keys
}

// maxTryAgain bounds how long retry sends again a script that a Cluster
// refused, when the context allows that long.
const maxTryAgain = 2 * time.Second

// run runs sc by SHA and falls back to sending its source when the server
// does not have it (a restart, or a master that just received the slot).
// A refusal during a Cluster slot migration is retried (see retry).
func (s *Store) run(ctx context.Context, sc script, keys, args []string) ([]int64, error) {
	reply, err := s.eval(ctx, sc, keys, args)
	if errors.Is(err, ErrTryAgain) {
		return s.retry(ctx, sc, keys, args, err)
	}
	return reply, err
}

// eval runs sc once: by SHA, then by source if the server lacks it.
func (s *Store) eval(ctx context.Context, sc script, keys, args []string) ([]int64, error) {
	reply, err := s.client.EvalSha(ctx, sc.sha, keys, args)
	if errors.Is(err, ErrNoScript) {
		reply, err = s.client.Eval(ctx, sc.src, keys, args)
	}
	return reply, err
}

// retry sends sc again after a Cluster refused it with err.
//
// During a slot migration, a script on several keys gets TRYAGAIN while its
// keys are split between the two masters, or when some of them do not
// exist yet on the target (a new client key under several limits), until
// the migration ends. Redis refused it before running it, so sending it
// again cannot count a request twice: retry backs off from about 1ms to
// 64ms with jitter (so that the decisions of a hot key do not retry in
// step), until the script runs, the context ends (its error then wraps
// both the context's and the refusal) or maxTryAgain has passed. The
// clients do not retry: rueidis never retries a script on TRYAGAIN (it
// retries read-only commands only), and go-redis gives up after
// MaxRedirects attempts (3) within milliseconds, returning the last
// TRYAGAIN, ASK or MOVED.
func (s *Store) retry(ctx context.Context, sc script, keys, args []string, err error) ([]int64, error) {
	deadline := time.Now().Add(maxTryAgain)
	timer := time.NewTimer(maxTryAgain) // reset before each wait
	defer timer.Stop()
	for delay := time.Millisecond; ; delay = min(2*delay, 64*time.Millisecond) {
		wait := delay/2 + rand.N(delay/2+1)
		if time.Now().Add(wait).After(deadline) {
			return nil, err
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			// The caller's cancellation or deadline is the error that
			// matters; the refusal is kept for the log.
			return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
		case <-timer.C:
		}
		var reply []int64
		if reply, err = s.eval(ctx, sc, keys, args); !errors.Is(err, ErrTryAgain) {
			return reply, err
		}
	}
}

// escape makes a client key safe as a hash tag: it is percent-encoded
// (percentEncode), a key longer than longkey.MaxLen becomes its
// longkey.Hash, and the empty key becomes "%0" (an empty tag "{}" would
// hash the whole key, sending the keys of one decision to different
// slots); no encoded key can equal either.
func escape(key string) string {
	if key == "" {
		return "%0"
	}
	if longkey.Hashed(key) {
		return longkey.Hash(key)
	}
	return percentEncode(key)
}

// percentEncode percent-encodes '%', '{' and '}' in s, so that s holds no
// hash tag delimiter and distinct strings stay distinct.
func percentEncode(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
