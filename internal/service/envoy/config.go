package envoy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/policy"
)

// Config is a loaded envoyproxy/ratelimit configuration: any number of
// domains, each a tree of descriptors. It is immutable once built; a
// Service swaps whole Configs (Service.Update).
type Config struct {
	// Domains maps each domain to its descriptor tree.
	Domains map[string]*Domain
	// Files are the files it was loaded from, in the order loaded.
	Files []string
}

// Domain is the root of one domain's descriptor tree.
type Domain struct {
	// Name is the domain, as Envoy's requests name it.
	Name string
	// Descriptors are the tree's top-level nodes, in file order.
	Descriptors []*Descriptor
	index       *node
	// replaces tells whether any of the domain's limits replaces others,
	// so that requests to a domain without any skip looking for them.
	replaces bool
	path     string // the file it was read from
}

// Descriptor is one node of the tree: a key, an optional value (empty:
// matches any value of the key), an optional rate limit and children.
type Descriptor struct {
	// Key is the descriptor entry key the node matches.
	Key string
	// Value is the entry value it matches: exactly, or as a prefix when it
	// ends in '*', or any value when empty.
	Value string
	// RateLimit is nil when the node only groups children.
	RateLimit *RateLimit
	// ShadowMode decides (and consumes) as usual but always reports OK.
	ShadowMode bool
	// QuotaMode, as in envoyproxy/ratelimit, reports the node's limit
	// when it is exceeded without making the request OVER_LIMIT: the
	// status is OK with current_limit and limit_remaining (0), and
	// overall_code is not affected.
	QuotaMode bool
	// ShareThreshold makes every value that the node's wildcard value
	// ("files/*") matches share one count, instead of one count per
	// value. Only a Value ending in '*' may set it.
	ShareThreshold bool
	// DetailedMetric is accepted for compatibility and ignored.
	DetailedMetric bool
	// Descriptors are the node's children, matched by the request's next
	// entry, in file order.
	Descriptors []*Descriptor
	// File and Line locate the node in its file.
	File string
	Line int
	n    *node // the node's index, to merge domains
}

// RateLimit is a descriptor's rate_limit block.
type RateLimit struct {
	// Unit is second, minute, hour, day, week, month (30 days) or year
	// (365 days), in lower case.
	Unit string
	// RequestsPerUnit is the number of requests admitted per unit (times
	// UnitMultiplier); 0 blocks every request.
	RequestsPerUnit uint32
	// UnitMultiplier multiplies the unit (0 or 1: one unit).
	UnitMultiplier uint32
	// Unlimited admits every request without counting it.
	Unlimited bool
	// Name identifies the limit for Replaces: a matched limit turns off,
	// for its request, the matched limits it names.
	Name string
	// Replaces names the limits this one turns off when both match.
	Replaces []string
	// Algorithm is sluice's extension: fixed_window by default.
	Algorithm sluice.Algorithm
	// Limit is the sluice limit enforced for this node. Limit.Limit is 0
	// when RequestsPerUnit is 0: every request is over the limit.
	Limit sluice.Limit
	// current is Unit as current_limit reports it.
	current rlsv3.RateLimitResponse_RateLimit_Unit
}

// node is the lookup index of a descriptor level.
type node struct {
	d        *Descriptor      // nil at a domain's root
	exact    map[Entry]*node  // by key and value
	prefix   []prefixNode     // values ending in '*', in file order
	wildcard map[string]*node // key with no value
}

// prefixNode is a wildcard: a value ending in '*' matches the key's
// values that start with the rest; a key ending in '*' with no value
// (joined) matches, as in envoyproxy/ratelimit, every entry whose key,
// '_' and value start with the rest.
type prefixNode struct {
	key, prefix string
	joined      bool
	n           *node
}

// wildcard returns the pattern of a descriptor that is a wildcard ("b*"
// of value: b*, or "x-*" of a key x-* with no value), or "".
func (d *Descriptor) wildcard() string {
	switch {
	case strings.HasSuffix(d.Value, "*"):
		return d.Value
	case d.Value == "" && strings.HasSuffix(d.Key, "*"):
		return d.Key
	}
	return ""
}

// ParseConfig parses one envoyproxy/ratelimit YAML document; path names
// the file in errors. It reads YAML as envoyproxy/ratelimit's YAML 1.1
// library does where a file could tell: a null value (~, or nothing) is
// the field left out, anchors, aliases and merge keys (<<: *base) apply,
// and requests_per_unit may be written 1_000, 0x10 or 010 (octal: 8).
func ParseConfig(path string, data []byte) (*Config, error) {
	doc, err := config.DecodeYAML(path, data)
	if err != nil {
		if e, ok := errors.AsType[*config.Error](err); ok {
			return nil, fmt.Errorf("%s:%d: %s", e.File, e.Line, e.Msg) // as the parser's own errors read
		}
		return nil, err
	}
	if doc == nil || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty config file", path)
	}
	p := &parser{file: path, budget: maxNodes}
	d := p.domain(p.resolve(doc.Content[0]))
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	return &Config{Domains: map[string]*Domain{d.Name: d}, Files: []string{path}}, nil
}

// maxNodes bounds the YAML nodes one file may make the parser visit, so
// that aliases nested in aliases (a "billion laughs" file) fail rather
// than take the process's memory and time.
const maxNodes = 1 << 20

type parser struct {
	file     string
	errs     []error
	replaces bool // a rate_limit with replaces was parsed
	budget   int  // nodes left to visit
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s:%d: %s", p.file, n.Line, fmt.Sprintf(format, args...)))
}

// resolve follows n's aliases and spends one node of the budget; past
// the budget it reports the file once and returns an empty mapping.
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if p.budget--; p.budget == -1 {
		p.errorf(n, "the file expands to more than %d YAML nodes (aliases within aliases?)", maxNodes)
	}
	if p.budget < 0 {
		return &yaml.Node{Kind: yaml.MappingNode, Line: n.Line}
	}
	return n
}

// isNull reports a YAML null: a field written without a value, or ~.
func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// fields returns the entries of mapping n by key, reporting keys not in
// allowed and keys given twice, and applying merge keys (<<: *base),
// whose entries yield to the mapping's own. A null value is left out, as
// a field not given.
func (p *parser) fields(n *yaml.Node, what string, allowed ...string) map[string]*yaml.Node {
	m := map[string]*yaml.Node{}
	if !p.collect(n, what, allowed, m, true) {
		return nil
	}
	return m
}

// collect adds the entries of mapping n to m; own tells whether n is the
// mapping itself (whose keys may not repeat) or one merged into it.
func (p *parser) collect(n *yaml.Node, what string, allowed []string, m map[string]*yaml.Node, own bool) bool {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping", what)
		return false
	}
	seen := map[string]bool{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], p.resolve(n.Content[i+1])
		if k.Value == "<<" && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		switch {
		case !slices.Contains(allowed, k.Value):
			p.errorf(k, "unknown field %q in %s (allowed: %s)", k.Value, what, strings.Join(allowed, ", "))
		case seen[k.Value]:
			p.errorf(k, "duplicate field %q in %s", k.Value, what)
		case !own && m[k.Value] != nil:
			// The mapping's own entry, or an earlier merge's, wins.
		default:
			seen[k.Value] = true
			if !isNull(v) {
				m[k.Value] = v
			}
		}
	}
	for _, v := range merges {
		if v.Kind == yaml.SequenceNode {
			for _, e := range v.Content {
				p.collect(p.resolve(e), what, allowed, m, false)
			}
			continue
		}
		p.collect(v, what, allowed, m, false)
	}
	return true
}

func (p *parser) str(n *yaml.Node, name string) string {
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, "%s must be a string", name)
		return ""
	}
	return n.Value
}

func (p *parser) boolean(n *yaml.Node, name string) bool {
	if n == nil {
		return false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.errorf(n, "%s must be true or false, got %q", name, n.Value)
	}
	return b
}

// uint32 reads a whole number as YAML 1.1 does: a plain one may hold
// underscores and be written in hexadecimal (0x10), octal (010, 0o10) or
// binary (0b10).
func (p *parser) uint32(n *yaml.Node, name string) uint32 {
	if n == nil {
		return 0
	}
	s, base := n.Value, 10
	if n.Style == 0 {
		s, base = strings.TrimPrefix(strings.ReplaceAll(s, "_", ""), "+"), 0
	}
	v, err := strconv.ParseUint(s, base, 32)
	if n.Kind != yaml.ScalarNode || err != nil {
		p.errorf(n, "%s must be a whole number from 0 to %d, got %q", name, uint32(1<<32-1), n.Value)
	}
	return uint32(v)
}

func (p *parser) domain(n *yaml.Node) *Domain {
	f := p.fields(n, "the config file", "domain", "descriptors")
	d := &Domain{Name: p.str(f["domain"], "domain"), index: &node{}, path: p.file}
	if d.Name == "" {
		p.errorf(n, "config file has no domain")
	}
	d.Descriptors = p.descriptors(f["descriptors"], d.Name, d.index)
	d.replaces = p.replaces
	return d
}

func (p *parser) descriptors(n *yaml.Node, parent string, idx *node) []*Descriptor {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "descriptors must be a list")
		return nil
	}
	var out []*Descriptor
	for _, c := range n.Content {
		c = p.resolve(c)
		f := p.fields(c, "a descriptor", "key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "share_threshold", "detailed_metric", "value_to_metric")
		if f == nil {
			continue
		}
		d := &Descriptor{
			Key: p.str(f["key"], "key"), Value: p.str(f["value"], "value"),
			ShadowMode:     p.boolean(f["shadow_mode"], "shadow_mode"),
			QuotaMode:      p.boolean(f["quota_mode"], "quota_mode"),
			ShareThreshold: p.boolean(f["share_threshold"], "share_threshold"),
			DetailedMetric: p.boolean(f["detailed_metric"], "detailed_metric"),
			File:           p.file, Line: c.Line,
		}
		p.boolean(f["value_to_metric"], "value_to_metric")
		if d.Key == "" {
			p.errorf(c, "descriptor has an empty key")
			continue
		}
		if d.ShareThreshold && d.wildcard() == "" {
			p.errorf(f["share_threshold"], "share_threshold can only be used with a wildcard value (ending in '*'), but %q has value %q", d.Key, d.Value)
		}
		full := parent + "." + d.Key
		if d.Value != "" {
			full += "_" + d.Value
		}
		if rl := f["rate_limit"]; rl != nil {
			d.RateLimit = p.rateLimit(rl, full)
		}
		child := &node{d: d}
		d.n = child
		if !idx.add(d, child) {
			p.errorf(c, "duplicate descriptor %q", full)
		}
		d.Descriptors = p.descriptors(f["descriptors"], full, child)
		out = append(out, d)
	}
	return out
}

func (idx *node) add(d *Descriptor, n *node) bool {
	switch pattern := d.wildcard(); {
	case pattern != "":
		pn := prefixNode{key: d.Key, prefix: strings.TrimSuffix(pattern, "*"), joined: d.Value == "", n: n}
		for _, o := range idx.prefix {
			if o.key == pn.key && o.prefix == pn.prefix && o.joined == pn.joined {
				return false
			}
		}
		idx.prefix = append(idx.prefix, pn)
	case d.Value == "":
		if idx.wildcard == nil {
			idx.wildcard = map[string]*node{}
		}
		if idx.wildcard[d.Key] != nil {
			return false
		}
		idx.wildcard[d.Key] = n
	default:
		if idx.exact == nil {
			idx.exact = map[Entry]*node{}
		}
		k := Entry{d.Key, d.Value}
		if idx.exact[k] != nil {
			return false
		}
		idx.exact[k] = n
	}
	return true
}

// lookup finds the child for one request entry: an exact value first,
// then the first value prefix ("foo*") in file order, then the key with no
// value. prefix tells whether a value prefix matched. It allocates
// nothing: it runs for every entry of every request.
func (idx *node) lookup(key, value string) (n *node, prefix bool) {
	if n := idx.exact[Entry{key, value}]; n != nil {
		return n, false
	}
	for _, pn := range idx.prefix {
		if pn.joined && joinedHasPrefix(key, value, pn.prefix) || !pn.joined && pn.key == key && strings.HasPrefix(value, pn.prefix) {
			return pn.n, true
		}
	}
	return idx.wildcard[key], false
}

// joinedHasPrefix reports whether key+"_"+value starts with prefix,
// without joining them.
func joinedHasPrefix(key, value, prefix string) bool {
	if len(prefix) <= len(key) {
		return strings.HasPrefix(key, prefix)
	}
	rest, ok := strings.CutPrefix(prefix, key)
	return ok && rest[0] == '_' && strings.HasPrefix(value, rest[1:])
}

// unit is one of envoyproxy/ratelimit's units: its name in a config file,
// its period, and its values in the protocol.
type unit struct {
	name     string
	period   time.Duration
	current  rlsv3.RateLimitResponse_RateLimit_Unit // in a status's current_limit
	override typev3.RateLimitUnit                   // in a limit override; UNKNOWN: none
}

// units lists the units of envoyproxy/ratelimit, every unit its protocol
// has, with the lengths it gives them: a month is 30 days and a year 365,
// and windows are aligned to the Unix epoch, so that a day starts at
// midnight UTC and a month every 30 days from 1970-01-01.
var units = [...]unit{
	{"second", time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, typev3.RateLimitUnit_SECOND},
	{"minute", time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE, typev3.RateLimitUnit_MINUTE},
	{"hour", time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR, typev3.RateLimitUnit_HOUR},
	{"day", 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY, typev3.RateLimitUnit_DAY},
	{"week", 7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK, typev3.RateLimitUnit_UNKNOWN},
	{"month", 30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH, typev3.RateLimitUnit_MONTH},
	{"year", 365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR, typev3.RateLimitUnit_YEAR},
}

// times returns the period of m units (0 or 1: one), or an error when it
// is longer than sluice.MaxPeriod (which it must not wrap around past).
func (u unit) times(m uint32) (time.Duration, error) {
	if m <= 1 {
		return u.period, nil
	}
	if most := sluice.MaxPeriod / u.period; time.Duration(m) > most {
		return 0, fmt.Errorf("unit_multiplier %d makes the period longer than %s: at most %d %ss", m, policy.CompactDuration(sluice.MaxPeriod), most, u.name)
	}
	return u.period * time.Duration(m), nil
}

// unitNames is the list of units, for errors.
const unitNames = "second, minute, hour, day, week, month or year"

// unitNamed returns the unit a config file calls name.
func unitNamed(name string) (unit, bool) {
	for _, u := range units {
		if u.name == name {
			return u, true
		}
	}
	return unit{}, false
}

// unitOfPeriod returns the unit whose period is d.
func unitOfPeriod(d time.Duration) (unit, bool) {
	for _, u := range units {
		if u.period == d {
			return u, true
		}
	}
	return unit{}, false
}

// unitOfOverride returns the unit of a limit override.
func unitOfOverride(o typev3.RateLimitUnit) (unit, bool) {
	for _, u := range units {
		if u.override == o && o != typev3.RateLimitUnit_UNKNOWN {
			return u, true
		}
	}
	return unit{}, false
}

func (p *parser) rateLimit(n *yaml.Node, full string) *RateLimit {
	f := p.fields(n, "rate_limit", "unit", "requests_per_unit", "unlimited", "name", "replaces", "unit_multiplier", "algorithm")
	if f == nil {
		return nil
	}
	rl := &RateLimit{
		Unit:            strings.ToLower(p.str(f["unit"], "unit")),
		RequestsPerUnit: p.uint32(f["requests_per_unit"], "requests_per_unit"),
		UnitMultiplier:  p.uint32(f["unit_multiplier"], "unit_multiplier"),
		Unlimited:       p.boolean(f["unlimited"], "unlimited"),
		Name:            p.str(f["name"], "name"),
		Algorithm:       sluice.FixedWindow,
	}
	if r := f["replaces"]; r != nil {
		if r.Kind != yaml.SequenceNode {
			p.errorf(r, "replaces must be a list")
		} else {
			for _, e := range r.Content {
				e = p.resolve(e)
				rf := p.fields(e, "a replaces entry", "name")
				name := p.str(rf["name"], "name")
				if name == "" {
					p.errorf(e, "replaces entry has no name")
				}
				if name != "" && name == rl.Name {
					p.errorf(e, "rate limit %q replaces itself: it would never be enforced", name)
				}
				rl.Replaces = append(rl.Replaces, name)
				p.replaces = true
			}
		}
	}
	if a := f["algorithm"]; a != nil {
		alg, err := sluice.ParseAlgorithm(p.str(a, "algorithm"))
		if err != nil {
			p.errorf(a, "%v", err)
		}
		rl.Algorithm = alg
	}
	u, ok := unitNamed(rl.Unit)
	if rl.Unlimited {
		// As in envoyproxy/ratelimit: a unit it knows is a mistake, and
		// anything else (requests_per_unit, a unit it does not know) is
		// ignored.
		if ok {
			p.errorf(f["unit"], "an unlimited rate_limit must not set a unit")
		}
		return rl
	}
	if !ok {
		at := n
		if f["unit"] != nil {
			at = f["unit"]
		}
		p.errorf(at, "invalid rate limit unit %q (%s)", rl.Unit, unitNames)
		return rl
	}
	rl.current = u.current
	period, err := u.times(rl.UnitMultiplier)
	if err != nil {
		p.errorf(f["unit_multiplier"], "%v", err)
		return rl
	}
	rl.Limit = sluice.Limit{Algorithm: rl.Algorithm, Limit: int(rl.RequestsPerUnit), Period: period, Name: limitName(full)}
	if rl.RequestsPerUnit > 0 {
		if err := rl.Limit.Validate(); err != nil {
			p.errorf(n, "%v", err)
		}
	}
	return rl
}

// limitName maps a descriptor path to the characters a sluice.Limit Name
// allows: anything else becomes '_'.
func limitName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

// Match returns the descriptor node whose rate limit applies to the
// request descriptor entries of domain, or nil. As in envoyproxy/ratelimit,
// a limit applies only at the node matched by the last entry: a request
// with more entries than the tree is deep, or ending at a node without a
// rate_limit, matches nothing.
func (c *Config) Match(domain string, entries []Entry) *Descriptor {
	d := c.Domains[domain]
	if d == nil {
		return nil
	}
	n, _ := d.resolve(entries)
	return n
}

// resolve returns the node whose rate limit applies to entries (see
// Match), or nil, and the entries its count is kept under: entries
// themselves, except that an entry matched by a value prefix whose node
// has share_threshold is kept under the pattern ("files/*"), so that
// every value it matches shares one count.
func (d *Domain) resolve(entries []Entry) (*Descriptor, []Entry) {
	if len(entries) == 0 {
		return nil, nil
	}
	idx, key, cloned := d.index, entries, false
	for i, e := range entries {
		n, prefix := idx.lookup(e.Key, e.Value)
		if n == nil {
			return nil, nil
		}
		if prefix && n.d.ShareThreshold {
			if !cloned {
				key, cloned = slices.Clone(entries), true
			}
			key[i].Value = n.d.wildcard()
		}
		idx = n
	}
	if idx.d.RateLimit == nil {
		return nil, nil
	}
	return idx.d, key
}

// A Path is one configured rate limit: its domain and the descriptors
// from the tree's top down to the node that holds it.
type Path struct {
	// Domain is the domain the limit belongs to.
	Domain string
	// Nodes are the descriptors a request's entries match, one per entry;
	// the last holds the RateLimit.
	Nodes []*Descriptor
}

// Node returns the descriptor that holds the path's rate limit.
func (p Path) Node() *Descriptor { return p.Nodes[len(p.Nodes)-1] }

// String writes the entries the path matches: "key=value" for an exact
// value, "key=prefix*" for a value prefix, "key" for any value, joined by
// ", ".
func (p Path) String() string {
	parts := make([]string, len(p.Nodes))
	for i, d := range p.Nodes {
		parts[i] = d.Key
		if d.Value != "" {
			parts[i] += "=" + d.Value
		}
	}
	return strings.Join(parts, ", ")
}

// Limits returns every rate limit of c, by domain in name order and, in
// a domain, in file order (a node before its children).
func (c *Config) Limits() []Path {
	var out []Path
	var walk func(domain string, above []*Descriptor, ds []*Descriptor)
	walk = func(domain string, above []*Descriptor, ds []*Descriptor) {
		for _, d := range ds {
			nodes := append(append([]*Descriptor(nil), above...), d)
			if d.RateLimit != nil {
				out = append(out, Path{Domain: domain, Nodes: nodes})
			}
			walk(domain, nodes, d.Descriptors)
		}
	}
	for _, name := range sortedDomains(c) {
		walk(name, nil, c.Domains[name].Descriptors)
	}
	return out
}

// Labels returns every label a Service under c tells its observer of
// (see WithObserver): each limit's name, in the order of Limits, then
// "override.<domain>" for each domain, in name order.
func (c *Config) Labels() []string {
	var names []string
	for _, p := range c.Limits() {
		names = append(names, p.Node().RateLimit.Limit.Name)
	}
	for _, d := range sortedDomains(c) {
		names = append(names, limitName("override."+d))
	}
	return names
}

// Entry is one key/value pair of a request descriptor.
type Entry struct {
	// Key is the entry's key, such as "remote_address".
	Key string
	// Value is the entry's value, such as "192.0.2.1".
	Value string
}
