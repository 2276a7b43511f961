package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// fleetScript records a heartbeat of the replica ARGV[1], valid for
// ARGV[2] ms of the server's clock, drops the replicas whose heartbeat
// ran out, and returns how many are left. Members are scored by when
// their heartbeat runs out; the key expires with the last of them.
var fleetScript = newScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl)
return {redis.call('ZCARD', KEYS[1])}
`)

// fleetKey is the key of the heartbeats: its hash tag, "%fleet", is one
// that no client key's (escape) can be, since escape writes '%' only as
// "%25", "%7B", "%7D" or the whole of "%0".
func (s *Store) fleetKey() string { return s.prefix + ":{%fleet}:replicas" }

// Heartbeat says that the replica named member is alive for ttl, and
// returns how many replicas are: those whose last heartbeat through a store
// of this prefix has not run out, member included. Replicas that beat
// every ttl/3 or so are counted while they run, and a replica that stops
// is dropped ttl after its last beat. It is how package policyfile learns
// the number of replicas whose share of each limit a replica enforces
// under a LocalOnError policy (sluice.WithReplicas). The heartbeats live
// in one sorted set, <prefix>:{%fleet}:replicas, which expires with the
// last of them.
func (s *Store) Heartbeat(ctx context.Context, member string, ttl time.Duration) (int, error) {
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("redis store: heartbeat: ttl %v is under 1ms", ttl)
	}
	reply, err := s.run(ctx, fleetScript, []string{s.fleetKey()}, []string{member, strconv.FormatInt(ttl.Milliseconds(), 10)})
	if err != nil {
		return 0, fmt.Errorf("redis store: heartbeat: %w", err)
	}
	if len(reply) != 1 || reply[0] < 1 {
		return 0, fmt.Errorf("redis store: heartbeat: script replied %v", reply)
	}
	return int(reply[0]), nil
}
