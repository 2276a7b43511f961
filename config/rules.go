package config

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

const (
	nameHelp = policy.NameChars
	keyHelp  = policy.KeySpecs
)

// redis returns the redis section, with defaults.
func (p *parser) redis(f field) Redis {
	r := Redis{OnError: "local", Timeout: sluice.DefaultStoreTimeout}
	if f.val == nil {
		return r
	}
	m, ok := p.mapping(f, "redis", redisFields, true)
	if !ok {
		return r
	}
	if e, ok := m["url"]; ok {
		if s, ok := p.str(e, "a Redis URL"); ok {
			if validRedisURL(s) {
				r.URL = s
			} else {
				// Not quoted back: the URL may hold a password.
				p.errorf(e.val.Line, e.path, "is not a Redis URL; write redis://[user:password@]host:port/db, rediss://... for TLS, or unix:///path/to/redis.sock (leave url out for the in-memory store)")
			}
		}
	}
	if e, ok := m["on_error"]; ok {
		if s, ok := p.oneOf(e, "allow", "deny", "local"); ok {
			r.OnError = s
		}
	}
	if e, ok := m["timeout"]; ok {
		if d, ok := p.duration(e); ok {
			if d <= 0 {
				p.errorf(e.val.Line, e.path, "must be positive, got %s; %s", d, durationHelp)
			} else {
				r.Timeout = d
			}
		}
	}
	return r
}

func validRedisURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "redis", "rediss":
		return u.Host != ""
	case "unix":
		return u.Path != ""
	}
	return false
}

// http returns the http section, with defaults.
func (p *parser) http(f field) HTTP {
	h := HTTP{Headers: "both", IPv6Prefix: policy.DefaultIPv6Prefix}
	if f.val == nil {
		return h
	}
	m, ok := p.mapping(f, "http", httpFields, true)
	if !ok {
		return h
	}
	if e, ok := m["headers"]; ok {
		if s, ok := p.oneOf(e, "both", "ietf", "legacy", "none"); ok {
			h.Headers = s
		}
	}
	if e, ok := m["problem_json"]; ok {
		h.ProblemJSON, _ = p.boolean(e)
	}
	if e, ok := m["policy_key"]; ok {
		h.PolicyKey, _ = p.boolean(e)
	}
	if e, ok := m["ipv6_prefix"]; ok {
		if n, ok := p.integer(e, "the prefix length by which ip keys group IPv6 clients, 1 to 128"); ok {
			if n < 1 || n > 128 {
				p.errorf(e.val.Line, e.path, "must be 1 to 128, got %d; /64 (the default) is what one subscriber gets, /56 or /48 group whole sites", n)
			} else {
				h.IPv6Prefix = n
			}
		}
	}
	if e, ok := m["trusted_proxies"]; ok {
		items, _ := p.list(e, "IP addresses and CIDR prefixes")
		for _, item := range items {
			s, ok := p.str(item, "an IP address or a CIDR prefix such as 10.0.0.0/8")
			if !ok {
				continue
			}
			pre, err := parseProxy(s)
			if err != nil {
				p.errorf(item.val.Line, item.path, "%q is not an IP address or a CIDR prefix; write one such as 10.0.0.0/8, 192.168.1.10 or fd00::/8", s)
				continue
			}
			h.TrustedProxies = append(h.TrustedProxies, pre)
		}
	}
	return h
}

// parseProxy returns the prefix s, or the single address s as a /32 or
// /128. Host bits after the prefix length are cleared.
func parseProxy(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		pre, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return pre.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("zone in %q", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ruleInfo is what the checks across rules need of a rule.
type ruleInfo struct {
	index     int // in the rules list
	path      string
	line      int
	name      field // name.val == nil: missing or invalid
	match     field // match.val == nil: the default rule, or invalid
	group     string
	groupOK   bool // false: the group is invalid, and the rule in none
	isDefault bool
}

// rules returns the rules list.
func (p *parser) rules(f field) ([]policy.Rule, []int) {
	items, ok := p.list(f, "rules")
	if !ok {
		return nil, nil
	}
	if len(items) == 0 {
		p.errorf(f.val.Line, f.path, "is empty: a policy file needs at least one rule")
		return nil, nil
	}
	rules := make([]policy.Rule, 0, len(items))
	infos := make([]ruleInfo, 0, len(items))
	lines := make([]int, 0, len(items))
	for i, item := range items {
		r, info := p.rule(item)
		info.index = i
		rules = append(rules, r)
		infos = append(infos, info)
		lines = append(lines, info.line)
	}
	p.checkNames(infos)
	groups := map[string][]ruleInfo{}
	var order []string
	for _, info := range infos {
		if !info.groupOK {
			continue // its group is reported; no other rule can clash with it
		}
		if _, ok := groups[info.group]; !ok {
			order = append(order, info.group)
		}
		groups[info.group] = append(groups[info.group], info)
	}
	for _, g := range order {
		p.checkMatches(groups[g])
	}
	p.checkLimitNames(rules, infos)
	return rules, lines
}

// name returns the rule or plan name f.
func (p *parser) name(f field) (string, bool) {
	s, ok := p.str(f, "a name of "+nameHelp)
	if !ok {
		return "", false
	}
	if !policy.ValidName(s) {
		if s == "" {
			p.errorf(f.val.Line, f.path, "is empty; a name holds %s", nameHelp)
		} else {
			p.errorf(f.val.Line, f.path, "%q may hold only %s (it names the IETF RateLimit policies)", s, nameHelp)
		}
		return "", false
	}
	return s, true
}

// group returns the group name f.
func (p *parser) group(f field) (string, bool) {
	s, ok := p.str(f, "a group name of "+nameHelp)
	if !ok {
		return "", false
	}
	switch {
	case s == "":
		p.errorf(f.val.Line, f.path, "is empty; leave group out for the default group, or give it a name of %s", nameHelp)
		return "", false
	case !policy.ValidName(s):
		p.errorf(f.val.Line, f.path, "%q may hold only %s", s, nameHelp)
		return "", false
	}
	return s, true
}

// rule returns one rule, with defaults.
func (p *parser) rule(f field) (policy.Rule, ruleInfo) {
	r := policy.Rule{Cost: 1}
	info := ruleInfo{path: f.path, line: f.val.Line, groupOK: true}
	m, ok := p.mapping(f, "a rule", ruleFields, false)
	if !ok {
		return r, info
	}
	if e, ok := m["name"]; ok {
		if s, ok := p.name(e); ok {
			r.Name = s
			info.name = e
		}
	} else {
		p.errorf(info.line, join(f.path, "name"), "is missing; every rule needs a name of %s", nameHelp)
	}
	if e, ok := m["group"]; ok {
		r.Group, info.groupOK = p.group(e)
		info.group = r.Group
	}
	if e, ok := m["match"]; ok {
		if s, ok := p.pattern(e); ok {
			r.Match = s
			info.match = e
		}
	} else {
		info.isDefault = true
	}
	keyOK := true
	if e, ok := m["key"]; ok {
		keyOK = false
		if s, ok := p.str(e, "one of "+keyHelp); ok {
			if k, msg := parseKey(s); msg != "" {
				p.errorf(e.val.Line, e.path, "%s", msg)
			} else {
				r.Key, keyOK = k, true
			}
		}
	}
	if e, ok := m["missing_key"]; ok {
		if s, ok := p.oneOf(e, policy.MissingKeyNames[:]...); ok {
			r.MissingKey = policy.MissingKey(slices.Index(policy.MissingKeyNames[:], s))
			if keyOK && (r.Key.Source == policy.KeyIP || r.Key.Source == policy.KeyGlobal) {
				p.errorf(e.val.Line, e.path, "applies only to header and query keys, and this rule's key is %s", r.Key)
			}
		}
	}
	var limitsOK bool
	r.Limits, limitsOK = p.limits(m, f, "a rule")
	costOK := true
	cost, hasCost := m["cost"]
	if hasCost {
		if n, ok := p.integer(cost, "cost is what one request spends, at least 1"); !ok {
			costOK = false
		} else if n < 1 {
			p.errorf(cost.val.Line, cost.path, "must be at least 1, got %d", n)
			costOK = false
		} else {
			r.Cost = n
		}
	}
	if e, ok := m["shadow"]; ok {
		r.Shadow, _ = p.boolean(e)
	}
	var plans []planInfo
	if e, ok := m["plans"]; ok {
		items, _ := p.list(e, "plans")
		for _, item := range items {
			pl := p.plan(item)
			plans = append(plans, pl)
			r.Plans = append(r.Plans, pl.Plan)
		}
		p.checkPlans(plans)
	}

	// Names come last: they use the rule's name, and only valid limits
	// have a compact period.
	r = r.WithLimitNames()
	if hasCost && costOK {
		// Against the limits that are valid, and named.
		var valid [][]sluice.Limit
		if limitsOK {
			valid = append(valid, r.Limits)
		}
		for i, pl := range plans {
			if pl.limitsOK {
				valid = append(valid, r.Plans[i].Limits)
			}
		}
		p.checkCost(cost, r.Cost, valid)
	}
	return r, info
}

// checkCost reports a cost that no limit could ever admit.
func (p *parser) checkCost(f field, cost int, lists [][]sluice.Limit) {
	var tight *sluice.Limit
	for _, ls := range lists {
		for i := range ls {
			if ls[i].ValidateCost(cost) != nil && (tight == nil || ls[i].Capacity() < tight.Capacity()) {
				tight = &ls[i]
			}
		}
	}
	if tight == nil {
		return
	}
	which := "the limit " + tight.Named("").String()
	if tight.Name != "" {
		which = fmt.Sprintf("limit %s (%s)", tight.Name, tight.Named(""))
	}
	p.errorf(f.val.Line, f.path, "%d exceeds the capacity %d of %s, so no request could ever be admitted; a cost is at most the smallest limit or burst of the rule and its plans",
		cost, tight.Capacity(), which)
}

// pattern returns the ServeMux pattern f, normalized.
func (p *parser) pattern(f field) (string, bool) {
	const help = `write [METHOD ][HOST]/PATH, such as "GET /api/search" or "/api/{id}", or leave match out for the default rule`
	s, ok := p.str(f, "a ServeMux pattern; "+help)
	if !ok {
		return "", false
	}
	pat := normalizePattern(s)
	if pat == "" {
		p.errorf(f.val.Line, f.path, "is empty; %s", help)
		return "", false
	}
	if err := register(http.NewServeMux(), pat); err != nil {
		msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("parsing %q: ", pat))
		p.errorf(f.val.Line, f.path, "%q is not a valid ServeMux pattern (%s); %s", s, msg, help)
		return "", false
	}
	if why := neverMatches(pat); why != "" {
		p.errorf(f.val.Line, f.path, "%q could never match a request: %s", s, why)
		return "", false
	}
	return pat, true
}

// neverMatches says why ServeMux would accept pattern but no request could
// match it, or "".
func neverMatches(pattern string) string {
	method, rest, found := strings.Cut(pattern, " ")
	if !found {
		method, rest = "", pattern
	}
	if method != strings.ToUpper(method) {
		return fmt.Sprintf("methods are case-sensitive; did you mean %q?", strings.ToUpper(method)+" "+rest)
	}
	host, path, _ := strings.Cut(rest, "/")
	switch {
	case host == "":
		return ""
	case strings.Contains(host, ":"):
		return "ServeMux matches the host without its port; leave the port out"
	case host != strings.ToLower(host):
		return fmt.Sprintf("hosts are matched in lower case; did you mean %q?", strings.ToLower(host)+"/"+path)
	case !strings.Contains(host, ".") && host != "localhost" && !strings.HasPrefix(host, "{"):
		return fmt.Sprintf("%q reads as a host name; did you mean %q?", host, "/"+rest)
	}
	return ""
}

// normalizePattern trims s and separates its method from the rest by one
// space, as ServeMux reads it.
func normalizePattern(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		s = s[:i] + " " + strings.TrimLeft(s[i+1:], " \t")
	}
	return s
}

// register adds pattern to mux, returning what ServeMux panics with.
func register(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

// parseKey returns the key spec s, or a message saying what is wrong.
func parseKey(s string) (policy.Key, string) {
	switch s {
	case "ip":
		return policy.Key{Source: policy.KeyIP}, ""
	case "global":
		return policy.Key{Source: policy.KeyGlobal}, ""
	}
	src, name, found := strings.Cut(s, ":")
	switch {
	case !found || src != "header" && src != "query":
		return policy.Key{}, fmt.Sprintf("%q is not one of %s", s, keyHelp)
	case name == "":
		if src == "header" {
			return policy.Key{}, fmt.Sprintf("%q has no header name; write header:<Name>, such as header:X-API-Key", s)
		}
		return policy.Key{}, fmt.Sprintf("%q has no parameter name; write query:<name>, such as query:api_key", s)
	case src == "header":
		for i := 0; i < len(name); i++ {
			if !isTokenChar(name[i]) {
				return policy.Key{}, fmt.Sprintf("%q is not a valid header name (letters, digits and !#$%%&'*+-.^_`|~ only)", name)
			}
		}
		return policy.Key{Source: policy.KeyHeader, Name: http.CanonicalHeaderKey(name)}, ""
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return policy.Key{}, fmt.Sprintf("query parameter name %q holds a space or a control character", name)
		}
	}
	return policy.Key{Source: policy.KeyQuery, Name: name}, ""
}

// isTokenChar reports whether c may appear in an HTTP field name (RFC 9110
// token).
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// limits returns the limits of a rule or plan m: the single-limit fields
// or a limits list. ok is false when any is invalid.
func (p *parser) limits(m map[string]field, owner field, what string) ([]sluice.Limit, bool) {
	var single *field
	for _, k := range limitFields {
		if e, ok := m[k]; ok && (single == nil || e.key.Line < single.key.Line) {
			single = &e
		}
	}
	list, hasList := m["limits"]
	switch {
	case single != nil && hasList:
		p.errorf(list.key.Line, list.path, "cannot be used with %s (line %d): %s has either the single-limit fields (algorithm, limit, period, burst) or a limits list, not both",
			single.key.Value, single.key.Line, what)
		p.limitFrom(m, owner, "")
		p.limitList(list)
		return nil, false
	case hasList:
		return p.limitList(list)
	}
	l, ok := p.limitFrom(m, owner, what+" needs limit and period, or a limits list")
	return []sluice.Limit{l}, ok
}

// limitList returns the limits of a limits list.
func (p *parser) limitList(f field) ([]sluice.Limit, bool) {
	items, ok := p.list(f, "limits such as {limit: 5, period: 1s}")
	if !ok {
		return nil, false
	}
	if len(items) == 0 {
		p.errorf(f.val.Line, f.path, "is empty; list at least one limit, such as {limit: 5, period: 1s}")
		return nil, false
	}
	var ls []sluice.Limit
	for _, item := range items {
		m, ok := p.mapping(item, "a limit", limitFields, false)
		if !ok {
			continue
		}
		if l, ok := p.limitFrom(m, item, "a limit needs limit and period"); ok {
			ls = append(ls, l)
		}
	}
	return ls, len(ls) == len(items)
}

// limitFrom returns the limit of the single-limit fields of m, validated
// by sluice.Limit.Validate. needs is the message for a missing limit or
// period.
func (p *parser) limitFrom(m map[string]field, owner field, needs string) (sluice.Limit, bool) {
	l := sluice.Limit{Algorithm: sluice.TokenBucket}
	bad := map[string]bool{} // fields already reported
	algoOK := true
	if e, ok := m["algorithm"]; ok {
		algoOK = false
		if s, ok := p.str(e, "one of "+sluice.AlgorithmNames()); ok {
			if a, err := sluice.ParseAlgorithm(s); err != nil {
				p.errorf(e.val.Line, e.path, "%q is not one of %s", s, sluice.AlgorithmNames())
			} else {
				l.Algorithm, algoOK = a, true
			}
		}
		bad["algorithm"] = !algoOK
	}
	if e, ok := m["limit"]; ok {
		n, ok := p.integer(e, "limit is the number of requests per period, at least 1")
		l.Limit, bad["limit"] = n, !ok
	} else {
		if needs != "" {
			p.errorf(owner.val.Line, join(owner.path, "limit"), "is missing; %s", needs)
		}
		bad["limit"] = true
	}
	if e, ok := m["period"]; ok {
		d, ok := p.duration(e)
		l.Period, bad["period"] = d, !ok
	} else {
		if needs != "" {
			p.errorf(owner.val.Line, join(owner.path, "period"), "is missing; %s", needs)
		}
		bad["period"] = true
	}
	if e, ok := m["burst"]; ok {
		switch n, ok := p.integer(e, "burst is how many requests an idle client may send at once, at least 1"); {
		case !ok:
			bad["burst"] = true
		case algoOK && l.Algorithm != sluice.TokenBucket && l.Algorithm != sluice.GCRA:
			p.errorf(e.val.Line, e.path, "burst applies to token_bucket and gcra only; %s admits at most limit per window (leave burst out)", l.Algorithm)
			bad["burst"] = true
		case n < 1:
			p.errorf(e.val.Line, e.path, "must be at least 1, got %d; leave burst out for a burst equal to limit", n)
			bad["burst"] = true
		default:
			l.Burst = n
		}
	}
	ok := true
	for _, b := range bad {
		ok = ok && !b
	}
	// Validate the rest, with a harmless stand-in for each field already
	// reported, and again after each error, so that every field gets its
	// own message.
	if bad["limit"] {
		l.Limit = 1
	}
	if bad["period"] {
		l.Period = time.Second
	}
	if bad["burst"] {
		l.Burst = 0
	}
	for range 4 {
		err := l.Validate()
		if err == nil {
			break
		}
		ok = false
		name, msg := attribute(err)
		if !bad[name] {
			line, path := owner.val.Line, owner.path
			if e, has := m[name]; has {
				line, path = e.val.Line, e.path
			} else if name != "" {
				path = join(owner.path, name)
			}
			p.errorf(line, path, "%s", msg)
		}
		bad[name] = true
		switch name {
		case "limit":
			l.Limit = 1
		case "period":
			l.Period = time.Second
		case "burst":
			l.Burst = 0
		default:
			return l, false
		}
	}
	return l, ok
}

// attribute returns the field of a rule a sluice.Limit.Validate error is
// about ("limit", "period", "burst", or "" for the rule itself), and its
// message without the limit's description, which the file shows. A reason
// that starts with its field's name drops it, since the path names the
// field: "rules[0].limit: must be at least 1".
func attribute(err error) (field, msg string) {
	var le *sluice.LimitError
	if !errors.As(err, &le) {
		return "", err.Error()
	}
	switch le.Field {
	case "limit", "period", "burst":
		if rest, ok := strings.CutPrefix(le.Reason, le.Field+" must "); ok {
			return le.Field, "must " + rest
		}
		return le.Field, le.Reason
	}
	return "", le.Reason
}

// planInfo is a plan and where its parts are.
type planInfo struct {
	policy.Plan
	name     field
	keys     []field
	prefixes []field
	limitsOK bool
}

// plan returns one plan of a rule.
func (p *parser) plan(f field) planInfo {
	var pl planInfo
	m, ok := p.mapping(f, "a plan", planFields, false)
	if !ok {
		return pl
	}
	if e, ok := m["name"]; ok {
		if s, ok := p.name(e); ok {
			pl.Name, pl.name = s, e
		}
	} else {
		p.errorf(f.val.Line, join(f.path, "name"), "is missing; every plan needs a name of %s", nameHelp)
	}
	strs := func(name, what string) ([]string, []field) {
		e, ok := m[name]
		if !ok {
			return nil, nil
		}
		items, _ := p.list(e, what)
		var ss []string
		var fs []field
		for _, item := range items {
			s, ok := p.str(item, "a client "+strings.TrimSuffix(what, "s"))
			if !ok {
				continue
			}
			if s == "" {
				p.errorf(item.val.Line, item.path, "is empty; a plan lists client %s", what)
				continue
			}
			ss, fs = append(ss, s), append(fs, item)
		}
		return ss, fs
	}
	pl.Keys, pl.keys = strs("keys", "keys")
	pl.Prefixes, pl.prefixes = strs("prefixes", "key prefixes")
	if noKeys(m) {
		p.errorf(f.val.Line, f.path, "has no keys and no prefixes; list the client keys the plan applies to in keys, or their prefixes in prefixes")
	}
	pl.Limits, pl.limitsOK = p.limits(m, f, "a plan")
	return pl
}

// noKeys reports whether plan m lists no keys and no prefixes: both are
// absent or empty (a value that is not a list has been reported).
func noKeys(m map[string]field) bool {
	for _, name := range []string{"keys", "prefixes"} {
		if e, ok := m[name]; ok && !isNull(e.val) && (e.val.Kind != yaml.SequenceNode || len(e.val.Content) > 0) {
			return false
		}
	}
	return true
}

// checkPlans reports duplicate plan names, and keys and prefixes that an
// earlier plan already matches (the first matching plan wins).
func (p *parser) checkPlans(plans []planInfo) {
	names := map[string]int{}
	keys := map[string]int{} // key → plan
	type prefix struct {
		s    string
		plan int
	}
	var prefixes []prefix
	covered := func(s string, before int) int {
		for _, pre := range prefixes {
			if pre.plan < before && strings.HasPrefix(s, pre.s) {
				return pre.plan
			}
		}
		return -1
	}
	planName := func(i int) string {
		if plans[i].Name != "" {
			return fmt.Sprintf("plans[%d] (%s)", i, plans[i].Name)
		}
		return fmt.Sprintf("plans[%d]", i)
	}
	for j, pl := range plans {
		if pl.name.val != nil {
			if i, dup := names[pl.Name]; dup {
				p.errorf(pl.name.val.Line, pl.name.path, "%q is also the name of plans[%d] (line %d); plan names are unique within a rule", pl.Name, i, plans[i].name.val.Line)
			} else {
				names[pl.Name] = j
			}
		}
		for _, k := range pl.keys {
			key := k.val.Value
			switch i, dup := keys[key]; {
			case dup && i == j:
				p.errorf(k.val.Line, k.path, "%q appears twice in this plan", key)
			case dup:
				p.errorf(k.val.Line, k.path, "%q is also a key of %s, and the first matching plan wins", key, planName(i))
			default:
				keys[key] = j
				if i := covered(key, j); i >= 0 {
					p.errorf(k.val.Line, k.path, "%q matches a prefix of %s, and the first matching plan wins", key, planName(i))
				}
			}
		}
		for n, pre := range pl.prefixes {
			s := pre.val.Value
			for _, other := range pl.prefixes[:n] {
				if other.val.Value == s {
					p.errorf(pre.val.Line, pre.path, "%q appears twice in this plan", s)
				}
			}
			if i := covered(s, j); i >= 0 {
				p.errorf(pre.val.Line, pre.path, "every key with prefix %q matches a prefix of %s, and the first matching plan wins", s, planName(i))
			}
		}
		for _, pre := range pl.prefixes {
			prefixes = append(prefixes, prefix{pre.val.Value, j})
		}
	}
}

// checkNames reports rule names that repeat.
func (p *parser) checkNames(infos []ruleInfo) {
	seen := map[string]int{}
	for i, info := range infos {
		if info.name.val == nil {
			continue
		}
		name := info.name.val.Value
		if j, dup := seen[name]; dup {
			p.errorf(info.name.val.Line, info.name.path, "%q is also the name of rules[%d] (line %d); rule names are unique", name, j, infos[j].line)
			continue
		}
		seen[name] = i
	}
}

// matchesAll reports whether a pattern matches every request, as the
// default rule would.
var matchesAll = regexp.MustCompile(`^/(\{[^{}/]*\.\.\.\})?$`)

// checkMatches reports, among the rules of one group, two default rules,
// two rules with the same pattern, and patterns that ServeMux finds in
// conflict (both match some request and neither is more specific), which
// it would refuse to register together. Rules of different groups stack
// instead, and never clash.
func (p *parser) checkMatches(infos []ruleInfo) {
	var inGroup string // for messages; "" for the default group
	if g := infos[0].group; g != "" {
		inGroup = fmt.Sprintf(" of group %q", g)
	}
	def := -1
	for i, info := range infos {
		if !info.isDefault {
			continue
		}
		if def >= 0 {
			p.errorf(info.line, join(info.path, "match"), "is missing here and in rules[%d] (line %d): only one rule%s may be the default rule (the one without match)", infos[def].index, infos[def].line, inGroup)
			continue
		}
		def = i
	}
	mux := http.NewServeMux()
	seen := map[string]int{}
	var registered []int
	for i, info := range infos {
		if info.match.val == nil {
			continue
		}
		pat := normalizePattern(info.match.val.Value)
		line, path := info.match.val.Line, info.match.path
		if j, dup := seen[pat]; dup {
			p.errorf(line, path, "%q is also the match of rules[%d] (line %d); one rule per pattern%s", pat, infos[j].index, infos[j].match.val.Line, strings.Replace(inGroup, " of", " in", 1))
			continue
		}
		seen[pat] = i
		if def >= 0 && matchesAll.MatchString(pat) {
			p.errorf(line, path, "%q matches every request, so the default rule rules[%d] (line %d)%s would never apply; keep one of them", pat, infos[def].index, infos[def].line, inGroup)
		}
		if register(mux, pat) == nil {
			registered = append(registered, i)
			continue
		}
		// Find the rules it conflicts with, one pair at a time.
		for _, j := range registered {
			other := normalizePattern(infos[j].match.val.Value)
			pair := http.NewServeMux()
			if register(pair, other) != nil {
				continue
			}
			if err := register(pair, pat); err != nil {
				msg := err.Error()
				if _, why, ok := strings.Cut(msg, ":\n"); ok {
					msg = why
				}
				p.errorf(line, path, "%q conflicts with the match %q of rules[%d] (line %d): %s",
					pat, other, infos[j].index, infos[j].match.val.Line, strings.ReplaceAll(msg, "\n", " "))
			}
		}
	}
}

// checkLimitNames reports two rules whose limits get the same name: the
// name is part of the limit's state in the store, so the two would share
// counts.
func (p *parser) checkLimitNames(rules []policy.Rule, infos []ruleInfo) {
	seen := map[string]int{} // limit name → rule
	for i, r := range rules {
		if infos[i].name.val == nil {
			continue
		}
		names := map[string]bool{}
		add := func(ls []sluice.Limit) {
			for _, l := range ls {
				if l.Name != "" {
					names[l.Name] = true
				}
			}
		}
		add(r.Limits)
		for _, pl := range r.Plans {
			add(pl.Limits)
		}
		for _, name := range slices.Sorted(maps.Keys(names)) {
			// Rules with one name are reported as such.
			if j, dup := seen[name]; dup && j != i && rules[j].Name != r.Name {
				p.errorf(infos[i].name.val.Line, infos[i].name.path, "gives a limit the name %q, which a limit of rules[%d] (line %d) has too (names are <rule>-[<plan>-]<period>); rename one of the rules or plans",
					name, j, infos[j].line)
				break
			}
			seen[name] = i
		}
	}
}
