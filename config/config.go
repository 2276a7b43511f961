package config

import (
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
)

// File is a validated policy file: every default is filled in, and every
// value has been checked.
type File struct {
	// Path is the path the file was loaded from, for messages.
	Path string
	// Redis configures the store.
	Redis Redis
	// HTTP configures the middleware's responses.
	HTTP HTTP
	// Rules are the rules in file order; there is at least one.
	Rules []Rule
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
}

// A Rule limits the requests its pattern matches.
type Rule struct {
	// Name identifies the rule; it holds letters, digits, '-', '_' and
	// '.', and is unique in the file.
	Name string
	// Match is a Go 1.22 http.ServeMux pattern ("GET /api/search",
	// "/api/{id}") with its whitespace normalized; "" makes the default
	// rule, which applies to requests no other rule matches.
	Match string
	// Key says where the client key of a request comes from.
	Key Key
	// MissingKey says what happens when a request lacks the key (a header
	// or query key that is absent): "reject" (401, the default), "deny"
	// (429) or "ip" (fall back to the client IP).
	MissingKey string
	// Limits are checked all or nothing in one atomic call. Each has a
	// Name usable as an IETF policy name: "<rule>-<period>", such as
	// "login-1m", with "-2", "-3"... when two would be equal (see
	// WithLimitNames).
	Limits []sluice.Limit
	// Cost is what one request spends; default 1.
	Cost int
	// Shadow makes the rule evaluate and report but never block.
	Shadow bool
	// Plans override Limits for listed client keys; the first matching
	// plan wins.
	Plans []Plan
	// Line is the line where the rule starts in the file, for messages.
	Line int
}

// A Key is the source of a rule's client key.
type Key struct {
	// Source is "ip", "header", "query" or "global".
	Source string
	// Name is the header (in canonical form, such as "X-Api-Key") or the
	// query parameter; "" for ip and global.
	Name string
}

// String returns the key as the file writes it: "ip", "global",
// "header:X-Api-Key" or "query:api_key".
func (k Key) String() string {
	if k.Name == "" {
		return k.Source
	}
	return k.Source + ":" + k.Name
}

// A Plan gives its own limits to some client keys of a rule, the way an
// API sells tiers: a paid key gets 10x.
type Plan struct {
	// Name identifies the plan within its rule; it holds letters, digits,
	// '-', '_' and '.'.
	Name string
	// Keys are client keys the plan applies to, compared exactly.
	Keys []string
	// Prefixes are prefixes of client keys the plan applies to.
	Prefixes []string
	// Limits replace the rule's limits for those keys. Their names are
	// "<rule>-<plan>-<period>", such as "search-pro-1s".
	Limits []sluice.Limit
}

// matches reports whether the plan applies to key.
func (p *Plan) matches(key string) bool {
	for _, k := range p.Keys {
		if k == key {
			return true
		}
	}
	for _, pre := range p.Prefixes {
		if strings.HasPrefix(key, pre) {
			return true
		}
	}
	return false
}

// LimitsFor returns the limits that apply to client key: those of the
// first plan whose keys or prefixes match it, else r.Limits. It compares
// key with every listed key and prefix in turn, which is cheap for the
// handful of tiers a file lists.
func (r Rule) LimitsFor(key string) []sluice.Limit {
	for i := range r.Plans {
		if r.Plans[i].matches(key) {
			return r.Plans[i].Limits
		}
	}
	return r.Limits
}

// Load reads the policy file at path and parses it with Parse. An error
// reading the file is returned as os.ReadFile returns it.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
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
