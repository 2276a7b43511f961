package config

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

// File is a validated policy file: every default is filled in, and every
// value has been checked.
type File struct {
	// Path is the path the file was loaded from, for messages.
	Path string
	// Redis configures the store.
	Redis Redis
	// Memory bounds the in-memory store (the store without Redis, and the
	// local fallback under on_error: local).
	Memory Memory
	// HTTP configures the middleware's responses.
	HTTP HTTP
	// Rules are the rules in file order; there is at least one. Their
	// limits are named (policy.Rule.WithLimitNames) and their costs set.
	Rules []policy.Rule
	// Lines holds the line where each rule starts, for messages.
	Lines []int
	// Leases holds, by limit name, the block of each limit of a rule
	// with a lease section (lease.BlockFor): a replica takes that many
	// units of a key's quota at once and answers from them in process.
	// nil when no rule leases.
	Leases map[string]int
}

// Compile returns the file's rules compiled, with the key settings of its
// http section (trusted proxies, IPv6 prefix) and opts: what a
// policy.Engine decides under. A file from Load or Parse always compiles;
// in a File built in code, a zero HTTP.IPv6Prefix is the default.
func (f *File) Compile(opts ...policy.Option) (*policy.RuleSet, error) {
	bits := f.HTTP.IPv6Prefix
	if bits == 0 {
		bits = policy.DefaultIPv6Prefix
	}
	base := []policy.Option{policy.WithTrustedProxies(f.HTTP.TrustedProxies...), policy.WithIPv6Prefix(bits)}
	return policy.Compile(f.Rules, append(base, opts...)...)
}

// Redis is the redis section: which store holds the counts, and what
// happens when it fails.
type Redis struct {
	// URL is the Redis server (redis://, rediss:// or unix://); "" means
	// the in-memory store, correct for one replica only.
	URL string
	// OnError is the error policy while the store fails: "allow" (admit
	// every request), "deny" (deny every request) or "local" (each replica
	// limits alone, in process). Default "local".
	OnError string
	// Timeout bounds every store call; default sluice.DefaultStoreTimeout.
	Timeout time.Duration
	// Replicas is the number of replicas that share the limits, whose
	// share of each limit a replica enforces under on_error local; 0 (the
	// default, "auto") learns it from the replicas' heartbeats in Redis.
	Replicas int
	// DenyCache answers in process the denials the store gave that must
	// still hold (sluice.WithDenyCache): a client hammering a key over
	// its limit costs Redis one decision per RetryAfter. Default false:
	// it is exact only under the conditions sluice.WithDenyCache states
	// (one Limit on every replica, no Cluster refunds, no reset by another
	// process, a Redis that keeps its data).
	DenyCache bool
	// Batch is the most decisions one Redis script call carries when the
	// store coalesces concurrent decisions (redis.WithBatch): 1 turns
	// coalescing off. 0, the default, leaves the store's own
	// (redis.DefaultBatch, 128).
	Batch int
	// WaitReplicas is how many replicas of the primary must acknowledge
	// a decision's write before it is answered (redis.WithWaitReplicas,
	// Redis's WAIT): an admitted decision fewer acknowledge within
	// WaitTimeout fails, and the error policy answers it. 0, the
	// default, answers at once (replication stays asynchronous, and a
	// failover may lose the last admits).
	WaitReplicas int
	// WaitTimeout bounds the wait for the replicas: a whole number of
	// milliseconds under Timeout; default half of Timeout. 0 when
	// WaitReplicas is 0.
	WaitTimeout time.Duration
}

// DefaultRedis returns the redis section of a file without one: the
// in-memory store, with the defaults a URL (given on a command line)
// would get.
func DefaultRedis() Redis {
	return Redis{OnError: "local", Timeout: sluice.DefaultStoreTimeout}
}

// Memory is the memory section: how much the in-memory store holds.
type Memory struct {
	// MaxKeys is the most entries (client key × limit) the in-memory
	// store holds, at least 1 (memory.WithCapacity); when it is full, the
	// least recently used entry is forgotten and that client starts
	// afresh. Default memory.DefaultCapacity.
	MaxKeys int
}

// HTTP is the http section: what the middleware tells clients, and whom it
// believes about their address.
type HTTP struct {
	// Headers selects the rate-limit headers: "both" (the default: the
	// IETF draft's RateLimit-Policy and RateLimit, and X-RateLimit-*),
	// "ietf", "legacy" or "none".
	Headers string
	// ProblemJSON makes 429 bodies RFC 9457 application/problem+json
	// instead of the brief's {"error":{...}} JSON.
	ProblemJSON bool
	// PolicyKey emits the draft's pk parameter (opt-in).
	PolicyKey bool
	// TrustedProxies are the proxies whose X-Forwarded-For and Forwarded
	// hops are trusted; a bare address in the file is a /32 or /128.
	TrustedProxies []netip.Prefix
	// IPv6Prefix is the prefix length by which ip keys group IPv6
	// clients, 1 to 128; default (and 0 in a File built in code)
	// policy.DefaultIPv6Prefix (64).
	IPv6Prefix int
}

// Load reads the policy file at path with ReadFile and parses it with
// Parse. An error reading the file is returned as ReadFile returns it: as
// os.Open returns it, or wrapping ErrFileTooLarge.
func Load(path string) (*File, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// MaxFileBytes is the largest configuration file ReadFile reads: a policy
// file (Load) or an envoyproxy/ratelimit one (envoy.LoadConfig). Real
// files are a few kilobytes; the limit keeps a wrong path (a log, a disk
// image) or a hostile file from taking the process's memory.
const MaxFileBytes = 4 << 20 // 4 MiB

// ErrFileTooLarge reports a file over MaxFileBytes.
var ErrFileTooLarge = errors.New("file too large")

// ReadFile returns the content of the file at path, or, for a file over
// MaxFileBytes, an error wrapping ErrFileTooLarge that names the file and
// the limit. It never reads more than MaxFileBytes+1 bytes: a regular
// file is judged by its size before any is read, anything else (a pipe,
// a device) by what it yields.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooLarge := func(size string) error {
		return fmt.Errorf("%s: %w: %s, over the limit of %d bytes (4 MiB)", path, ErrFileTooLarge, size, MaxFileBytes)
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxFileBytes {
		return nil, tooLarge(fmt.Sprintf("%d bytes", fi.Size()))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, tooLarge(fmt.Sprintf("more than %d bytes", MaxFileBytes))
	}
	return data, nil
}

// Parse parses and validates the policy file data; path names the file in
// messages. When the file is invalid the error is an Errors holding every
// problem found, and the File is nil.
func Parse(path string, data []byte) (*File, error) {
	p := &parser{file: path, budget: 4*len(data) + 10000}
	f := p.parse(data)
	if len(p.errs) > 0 {
		p.sort()
		return nil, p.errs
	}
	f.Path = path
	return f, nil
}
