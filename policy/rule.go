package policy

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
)

// A Rule limits the requests its pattern matches. Build rules in code or
// read them from a policy file (package config); Compile checks either
// the same way.
type Rule struct {
	// Name identifies the rule; it holds letters, digits, '-', '_' and
	// '.' (ValidName), and is unique in a rule set.
	Name string
	// Group is the stack the rule belongs to. Within a group, the most
	// specific matching rule applies (http.ServeMux precedence), and the
	// group's rule without Match applies to requests no other rule of the
	// group matches. Every group applies on its own: a request matched by
	// rules of three groups is limited by all three at once, admitted
	// only if each of them admits it. "" is the default group.
	Group string
	// Match is a Go 1.22 http.ServeMux pattern ("GET /api/search",
	// "/api/{id}"); "" makes the group's default rule.
	Match string
	// Key says where the client key of a request comes from; the zero
	// value is KeyIP. A rule keyed by KeyRequest takes the key its
	// caller names, and has neither Match nor Group.
	Key Key
	// MissingKey says what happens when a request lacks the key (a header
	// or query key that is absent); the zero value is RejectMissing.
	MissingKey MissingKey
	// Limits are checked all or nothing. Compile names each limit without
	// a Name as a policy file does (see Compile).
	Limits []sluice.Limit
	// Cost is what one request spends; 0 means 1.
	Cost int
	// Settle, when not nil, makes Cost a reserve: a request is admitted
	// at Cost and settled at what its work cost (see Settle).
	Settle *Settle
	// Shadow makes the rule evaluate and report but never block.
	Shadow bool
	// RetryAfter, when above 0, caps the RetryAfter of a denial by the
	// rule's Concurrency limits. A store can promise a free slot only
	// when the oldest lease could end (a lease long enough for the
	// slowest request: 30s), while requests that take milliseconds free
	// theirs far sooner: this is the wait to suggest instead. 0: the
	// lease's end.
	RetryAfter time.Duration
	// OnError, unless it is the zero ErrorPolicy, answers for the rule
	// when the store fails, in place of the Limiter's policy (see
	// sluice.Part.OnError): a login rule that fails closed, a status
	// endpoint that fails open. sluice.ReturnErrors is not allowed: a
	// rule's outage is answered, not returned.
	OnError sluice.ErrorPolicy
	// Plans override Limits for listed client keys; the first matching
	// plan wins.
	Plans []Plan
	// Priority, when not nil, sheds load by class: each request gets a
	// class, and the lower classes may use only part of the capacity of
	// Limits (see Priority). A rule with a Priority has no Plans.
	Priority *Priority

	priority *compiled // Compile's of Priority
}

// A Key is the source of a rule's client key.
type Key struct {
	// Source is where the key comes from.
	Source Source
	// Name is the header (in canonical form, such as "X-Api-Key") or the
	// query parameter; "" for the sources that take no name.
	Name string
}

// Source is where a rule's client key comes from.
type Source uint8

// The key sources. A client key lives in the namespace of its source, so
// that no client can choose a header value that collides with another
// client's address.
const (
	// KeyIP keys by the client's address (ClientIP), IPv6 addresses
	// grouped by their prefix (WithIPv6Prefix).
	KeyIP Source = iota
	// KeyHeader keys by the value of the header Key.Name.
	KeyHeader
	// KeyQuery keys by the value of the query parameter Key.Name.
	KeyQuery
	// KeyGlobal puts every request in one bucket.
	KeyGlobal
	// KeyRequest keys by the key the caller of Check names: the decision
	// service's callers (POST /v1/check, Envoy's gRPC) know their client,
	// an API key, a user id or a tenant, and any non-empty text is one.
	// Such a rule is checked by name only (CheckedByName): an HTTP request
	// names no client, so Decide never applies it, and it has no Match
	// and no Group.
	KeyRequest
)

// sources states the key sources once: how a policy file writes each
// (Key.String, ParseKey, KeySpecs), and, for a source that takes a name,
// what the name is.
var sources = [...]sourceDef{
	KeyIP:      {name: "ip"},
	KeyHeader:  {name: "header", arg: "<Name>", what: "header name", example: "header:X-API-Key"},
	KeyQuery:   {name: "query", arg: "<name>", what: "parameter name", example: "query:api_key"},
	KeyGlobal:  {name: "global"},
	KeyRequest: {name: "request"},
}

// sourceDef is how a policy file writes a key source.
type sourceDef struct {
	name    string // the source, as a policy file writes it
	arg     string // for a source that takes a name: its placeholder in KeySpecs
	what    string // and what the name is, in messages
	example string // and a key of the source, in messages
}

// String returns the source's name: "ip", "header", "query", "global" or
// "request".
func (s Source) String() string {
	if int(s) < len(sources) {
		return sources[s].name
	}
	return fmt.Sprintf("Source(%d)", s)
}

// Named reports whether the source takes a name (KeyHeader, KeyQuery):
// the sources whose key a request may lack, which Rule.MissingKey is
// about.
func (s Source) Named() bool { return int(s) < len(sources) && sources[s].arg != "" }

// KeySpecs says how a policy file writes a rule's key, for messages:
// "ip, header:<Name>, query:<name>, global or request".
var KeySpecs = keySpecs(func(Source) bool { return true })

// MatchedKeySpecs says, for messages, the keys of the rules that are
// matched to HTTP requests: every source but KeyRequest.
var MatchedKeySpecs = keySpecs(func(s Source) bool { return s != KeyRequest })

// keySpecs writes the sources that keep holds as a policy file writes
// them, joined for a message.
func keySpecs(keep func(Source) bool) string {
	var specs []string
	for i, src := range sources {
		if !keep(Source(i)) {
			continue
		}
		spec := src.name
		if src.arg != "" {
			spec += ":" + src.arg
		}
		specs = append(specs, spec)
	}
	return strings.Join(specs[:len(specs)-1], ", ") + " or " + specs[len(specs)-1]
}

// CheckedByName says, for messages, what a rule keyed by request is.
const CheckedByName = "a rule keyed by request takes the key its caller names (POST /v1/check, Envoy's gRPC) and is checked by name, never matched to an HTTP request"

// String returns the key as a policy file writes it: "ip", "global",
// "request", "header:X-Api-Key" or "query:api_key".
func (k Key) String() string {
	if k.Source.Named() {
		return k.Source.String() + ":" + k.Name
	}
	return k.Source.String()
}

// ParseKey returns the key that s writes as a policy file does (see
// KeySpecs and Key.String); a header name is canonicalized (x-api-key
// becomes X-Api-Key). The error says what is wrong and what is accepted.
func ParseKey(s string) (Key, error) {
	name, arg, hasArg := strings.Cut(s, ":")
	i := slices.IndexFunc(sources[:], func(src sourceDef) bool { return src.name == name })
	if i < 0 || hasArg && sources[i].arg == "" {
		return Key{}, fmt.Errorf("%q is not one of %s", s, KeySpecs)
	}
	src, def := Source(i), sources[i]
	if !src.Named() {
		return Key{Source: src}, nil
	}
	if arg == "" {
		return Key{}, fmt.Errorf("%q has no %s; write %s:%s, such as %s", s, def.what, def.name, def.arg, def.example)
	}
	if src == KeyHeader {
		for i := 0; i < len(arg); i++ {
			if !isTokenChar(arg[i]) {
				return Key{}, fmt.Errorf("%q is not a valid header name (letters, digits and !#$%%&'*+-.^_`|~ only)", arg)
			}
		}
		return Key{Source: src, Name: http.CanonicalHeaderKey(arg)}, nil
	}
	for _, r := range arg {
		if r <= ' ' || r == 0x7f {
			return Key{}, fmt.Errorf("query parameter name %q holds a space or a control character", arg)
		}
	}
	return Key{Source: src, Name: arg}, nil
}

// isTokenChar reports whether c may appear in an HTTP field name (RFC 9110
// token).
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// MissingKey says what happens to a request that lacks its rule's header
// or query key.
type MissingKey uint8

// The answers to a missing key.
const (
	// RejectMissing answers 401: the request must carry the key.
	RejectMissing MissingKey = iota
	// DenyMissing answers 429, without Retry-After: waiting would not
	// help.
	DenyMissing
	// IPIfMissing keys the request by its client address instead.
	IPIfMissing
)

// MissingKeyNames are the names of the MissingKey values, in order.
var MissingKeyNames = [...]string{RejectMissing: "reject", DenyMissing: "deny", IPIfMissing: "ip"}

// String returns the name: "reject", "deny" or "ip".
func (m MissingKey) String() string {
	if int(m) < len(MissingKeyNames) {
		return MissingKeyNames[m]
	}
	return fmt.Sprintf("MissingKey(%d)", m)
}

// A Plan gives its own limits to some client keys of a rule, the way an
// API sells tiers: a paid key gets 10x.
type Plan struct {
	// Name identifies the plan within its rule (ValidName).
	Name string
	// Keys are client keys the plan applies to, compared exactly.
	Keys []string
	// Prefixes are prefixes of client keys the plan applies to.
	Prefixes []string
	// Limits replace the rule's limits for those keys. Compile names them
	// "<rule>-<plan>-<period>", such as "search-pro-1s".
	Limits []sluice.Limit
}

// matches reports whether the plan applies to key.
func (p *Plan) matches(key string) bool {
	if slices.Contains(p.Keys, key) {
		return true
	}
	for _, pre := range p.Prefixes {
		if strings.HasPrefix(key, pre) {
			return true
		}
	}
	return false
}

// LimitsFor returns the limits that apply to client key: those of the
// first plan whose keys or prefixes match it, else r.Limits.
func (r *Rule) LimitsFor(key string) []sluice.Limit {
	for i := range r.Plans {
		if r.Plans[i].matches(key) {
			return r.Plans[i].Limits
		}
	}
	return r.Limits
}

// PlanFor returns the name of the first plan whose keys or prefixes match
// client key, or "" when none does (the rule's own Limits apply).
func (r *Rule) PlanFor(key string) string {
	for i := range r.Plans {
		if r.Plans[i].matches(key) {
			return r.Plans[i].Name
		}
	}
	return ""
}

// NameChars says which characters a rule, plan or limit name holds.
const NameChars = "letters, digits, '-', '_' and '.'"

var validName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// ValidName reports whether s can name a rule, a group or a plan: one or
// more of NameChars, the characters of an IETF RateLimit policy name,
// which limit names are made of.
func ValidName(s string) bool { return validName.MatchString(s) }

// WithLimitNames returns a copy of r whose Limits, Plans and plans'
// Limits, Keys and Prefixes are its own, with every limit that has no Name given the name a policy
// file gives it: "<rule>-<period>" for the rule's own limits, such as
// "login-1m", and "<rule>-<plan>-<period>" for a plan's, such as
// "search-pro-1s", with "-2", "-3"... appended to a name already taken in
// the same list. The name is the limit's storage identity with its
// algorithm and period (sluice.Limit.Identity), so limits of different
// rules never share counts, and the same rule shares them through every
// door. A rule without a valid Name (ValidName) has nothing to name its
// limits after and keeps them unnamed, and so does a plan without one: a
// name such as "-1s" or "my rule-1s" would only show up in messages about
// the rule's name.
func (r Rule) WithLimitNames() Rule {
	r.Limits = slices.Clone(r.Limits)
	r.Plans = slices.Clone(r.Plans)
	for i := range r.Plans {
		p := &r.Plans[i]
		p.Limits, p.Keys, p.Prefixes = slices.Clone(p.Limits), slices.Clone(p.Keys), slices.Clone(p.Prefixes)
	}
	if !ValidName(r.Name) {
		return r
	}
	nameLimits(r.Name, r.Limits)
	for i := range r.Plans {
		if ValidName(r.Plans[i].Name) {
			nameLimits(r.Name+"-"+r.Plans[i].Name, r.Plans[i].Limits)
		}
	}
	return r
}

// nameLimits names each unnamed limit of ls prefix-<period>, appending -2,
// -3... to a name that another limit of ls has.
func nameLimits(prefix string, ls []sluice.Limit) {
	taken := map[string]bool{}
	for _, l := range ls {
		if l.Name != "" {
			taken[l.Name] = true
		}
	}
	for i := range ls {
		if ls[i].Name != "" {
			continue
		}
		base := prefix + "-" + CompactDuration(ls[i].Period)
		if ls[i].Algorithm == sluice.Concurrency {
			base = prefix + "-concurrent" // its lease is no part of its identity
		}
		name := base
		for n := 2; taken[name]; n++ {
			name = fmt.Sprintf("%s-%d", base, n)
		}
		ls[i].Name = name
		taken[name] = true
	}
}

// CompactDuration formats d as time.Duration.String does without its zero
// units: 1m, 1h, 1h30m, 1h0m30s as 1h30s, 500ms.
func CompactDuration(d time.Duration) string {
	s := d.String()
	var b strings.Builder
	for s != "" {
		// A number, then its unit.
		i := strings.IndexFunc(s, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.' || r == '-') })
		if i < 0 {
			b.WriteString(s)
			break
		}
		j := strings.IndexFunc(s[i:], func(r rune) bool { return r >= '0' && r <= '9' || r == '.' })
		if j < 0 {
			j = len(s)
		} else {
			j += i
		}
		if s[:i] != "0" {
			b.WriteString(s[:j])
		}
		s = s[j:]
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}
