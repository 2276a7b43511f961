package policy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path"
	"slices"
	"strings"

	"github.com/sluice-go/sluice"
)

// KeyFunc extracts the client key of a request, for example the
// authenticated user stored in its context; ok is false when the request
// has none.
type KeyFunc func(r *http.Request) (key string, ok bool)

// Option configures a RuleSet.
type Option func(*RuleSet)

// WithTrustedProxies sets the proxies whose X-Forwarded-For and Forwarded
// hops are believed when a rule is keyed by client IP (see ClientIP).
func WithTrustedProxies(p ...netip.Prefix) Option {
	return func(s *RuleSet) { s.trusted = append(s.trusted, p...) }
}

// DefaultIPv6Prefix is the prefix length by which KeyIP groups IPv6
// clients: a /64 is what one subscriber gets, and an address within it
// costs nothing to change.
const DefaultIPv6Prefix = 64

// WithIPv6Prefix makes KeyIP rules key an IPv6 client by the first bits
// of its address (1 to 128; default DefaultIPv6Prefix), so that a client
// cannot rotate through its prefix for fresh buckets. IPv4 clients are
// keyed by their whole address.
func WithIPv6Prefix(bits int) Option {
	return func(s *RuleSet) { s.ipv6Bits = bits }
}

// WithKey makes the rule named rule take its client key from f for HTTP
// requests, instead of its key source: the way to key by an authenticated
// user. A request for which f finds no key falls back to the rule's own
// key source.
func WithKey(rule string, f KeyFunc) Option {
	return func(s *RuleSet) { s.funcs[rule] = f }
}

// RuleSet is a compiled, validated set of rules: what an Engine decides
// under. It is immutable; build a new one to change the rules. Create it
// with Compile.
type RuleSet struct {
	rules    []*Rule // in the order given
	byName   map[string]*Rule
	groups   []*group // in the order of their first rule
	trusted  []netip.Prefix
	ipv6Bits int
	funcs    map[string]KeyFunc
}

// group is one stack of rules: the most specific match applies.
type group struct {
	name    string
	mux     *http.ServeMux // patterns of the rules with a match
	matched []*Rule        // the rules in mux, in the order added
	def     *Rule          // the rule without match, or nil
}

// ruleHandler is what a group's mux returns for a matched rule.
type ruleHandler struct{ r *Rule }

func (ruleHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// Compile checks rules and returns them compiled. Each rule is copied;
// its zero Cost becomes 1, and every limit without a Name is named as a
// policy file names it: "<rule>-<period>" for a rule's own limits, such as
// "login-1m", and "<rule>-<plan>-<period>" for a plan's, such as
// "search-pro-1s", with "-2", "-3"... appended to a name already taken in
// the same list. A limit's name, algorithm and period are its storage
// identity (sluice.Limit.Identity), so limits of different rules never
// share counts, and one rule shares its counts through every door.
//
// Compile reports every problem it finds, joined: a rule or plan without a
// valid name, two rules with one name, a rule or plan without limits, an
// invalid limit, a cost that a limit could never admit, two rules whose
// limits get one name, a key source without a name, a malformed pattern,
// two default rules or two rules with one pattern in a group, patterns of
// one group that http.ServeMux finds in conflict, a rule whose OnError is
// ReturnErrors, a rule keyed by KeyRequest with a Match or a Group, an
// IPv6 prefix out of range, and a WithKey naming no rule or a rule keyed
// by KeyRequest.
//
// A rule keyed by KeyRequest is in no group: Decide never applies it,
// and it is not the default rule of the group "" (CheckedByName).
func Compile(rules []Rule, opts ...Option) (*RuleSet, error) {
	s := &RuleSet{byName: map[string]*Rule{}, ipv6Bits: DefaultIPv6Prefix, funcs: map[string]KeyFunc{}}
	for _, o := range opts {
		o(s)
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.ipv6Bits < 1 || s.ipv6Bits > 128 {
		bad("policy: the IPv6 prefix must be 1 to 128 bits, got %d", s.ipv6Bits)
	}
	limitNames := map[string]string{} // limit name → rule
	groups := map[string]*group{}
	for i := range rules {
		r := rules[i].WithLimitNames()
		if r.Cost == 0 {
			r.Cost = 1
		}
		which := fmt.Sprintf("rules[%d]", i)
		if r.Name != "" {
			which = fmt.Sprintf("rule %q", r.Name)
		}
		for _, err := range checkRule(&r) {
			bad("policy: %s: %w", which, err)
		}
		if _, dup := s.byName[r.Name]; dup && r.Name != "" {
			bad("policy: %s: another rule has this name; rule names are unique", which)
		}
		for _, l := range r.allLimits() {
			if l.Name == "" {
				continue // the rule or plan has no valid name, reported above
			}
			if other, dup := limitNames[l.Name]; dup && other != r.Name {
				bad("policy: %s: limit %q has the name of a limit of rule %q, so the two would share counts; rename one", which, l.Name, other)
			}
			limitNames[l.Name] = r.Name
		}
		if p := r.Priority; p != nil {
			own := *p // the caller's copy untouched
			own.Classes, own.Routes = slices.Clone(p.Classes), slices.Clone(p.Routes)
			r.Priority = &own
			mux, perrs := own.check(&r)
			for _, err := range perrs {
				bad("policy: %s: %w", which, err)
			}
			if len(perrs) == 0 {
				r.priority = own.compile(r.Limits, mux)
				if i, cut, ok := own.TooDear(r.Limits, own.Lowest(), r.Cost); ok {
					bad("policy: %s: priority: cost %d is more than the lowest class, %q, may use of limit %s (%d of %d): its requests could never be admitted; lower the cost or the reserves", which, r.Cost, own.Lowest(), r.Limits[i].Name, cut.Capacity(), r.Limits[i].Capacity())
				}
			}
		}
		rp := &r
		s.rules = append(s.rules, rp)
		s.byName[r.Name] = rp
		if r.Key.Source == KeyRequest {
			continue // checked by name only, in no group
		}
		g := groups[r.Group]
		if g == nil {
			g = &group{name: r.Group, mux: http.NewServeMux()}
			groups[r.Group] = g
			s.groups = append(s.groups, g)
		}
		if err := g.add(rp); err != nil {
			bad("policy: %s: %w", which, err)
		}
	}
	for _, r := range s.rules {
		if p := r.Priority; p != nil && p.Plan != "" {
			if err := p.checkPlan(s); err != nil {
				bad("policy: rule %q: %w", r.Name, err)
			}
		}
	}
	for name := range s.funcs {
		switch r := s.byName[name]; {
		case r == nil:
			bad("policy: WithKey names rule %q, which is not among the rules", name)
		case r.Key.Source == KeyRequest:
			bad("policy: WithKey names rule %q, and %s: its KeyFunc would never run", name, CheckedByName)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// checkRule returns what is wrong with r, whose limits are named.
func checkRule(r *Rule) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case r.RetryAfter < 0:
		bad("retry_after %s is negative", r.RetryAfter)
	case r.RetryAfter > 0 && !slices.ContainsFunc(r.allLimits(), func(l sluice.Limit) bool { return l.Algorithm == sluice.Concurrency }):
		bad("retry_after %s caps the wait a concurrency limit suggests, and the rule has none", r.RetryAfter)
	}
	if !ValidName(r.Name) {
		bad("name %q is not valid; a name holds %s", r.Name, NameChars)
	}
	if r.Group != "" && !ValidName(r.Group) {
		bad("group %q is not valid; a name holds %s", r.Group, NameChars)
	}
	switch {
	case int(r.Key.Source) >= len(sources):
		bad("key source %v is not one of %s", r.Key.Source, KeySpecs)
	case r.Key.Source.Named():
		if r.Key.Name == "" {
			bad("key %s has no name", r.Key.Source)
		}
		if r.Key.Source == KeyHeader {
			r.Key.Name = http.CanonicalHeaderKey(r.Key.Name)
		}
	case r.MissingKey != RejectMissing:
		bad("missing_key applies only to header and query keys, and this rule's key is %s", r.Key)
	}
	if r.Key.Source == KeyRequest {
		if r.Match != "" {
			bad("match %q: %s; leave match out, or key the rule by %s", r.Match, CheckedByName, MatchedKeySpecs)
		}
		if r.Group != "" {
			bad("group %q: %s, and in no group; leave group out", r.Group, CheckedByName)
		}
	}
	if st := r.Settle; st != nil {
		if st.CostFrom.Header != "" {
			if c, err := ParseCostSource(st.CostFrom.String()); err != nil {
				bad("settle: %v", err)
			} else {
				r.Settle = &Settle{CostFrom: c, Strip: st.Strip} // canonical, and the caller's copy untouched
			}
		}
	}
	if int(r.MissingKey) >= len(MissingKeyNames) {
		bad("missing key %v is not one of %s", r.MissingKey, strings.Join(MissingKeyNames[:], ", "))
	}
	if r.Cost < 0 {
		bad("cost must be at least 1, got %d", r.Cost)
	}
	if r.OnError == sluice.ReturnErrors {
		bad("on_error %q is not allowed for a rule; write one of %s, or leave it out for the store's", r.OnError, strings.Join(sluice.OutagePolicies, ", "))
	}
	check := func(what string, ls []sluice.Limit) {
		if len(ls) == 0 {
			bad("%s has no limits", what)
		}
		for _, l := range ls {
			if err := l.Validate(); err != nil {
				bad("%s: %w", what, err)
			} else if err := l.ValidateCost(r.Cost); err != nil && r.Cost >= 0 {
				bad("%s: %w", what, err)
			}
		}
	}
	check("limits", r.Limits)
	plans := map[string]bool{}
	for i, p := range r.Plans {
		what := fmt.Sprintf("plan %q", p.Name)
		if !ValidName(p.Name) {
			bad("plans[%d]: name %q is not valid; a name holds %s", i, p.Name, NameChars)
			what = fmt.Sprintf("plans[%d]", i)
		} else if plans[p.Name] {
			bad("plans[%d]: another plan of the rule is named %q", i, p.Name)
		}
		plans[p.Name] = true
		check(what, p.Limits)
	}
	return errs
}

// allLimits returns the rule's limits and its plans'.
func (r *Rule) allLimits() []sluice.Limit {
	ls := append([]sluice.Limit(nil), r.Limits...)
	for _, p := range r.Plans {
		ls = append(ls, p.Limits...)
	}
	return ls
}

// add puts r in the group, or says why it cannot be.
func (g *group) add(r *Rule) error {
	if r.Match == "" {
		if g.def != nil {
			return fmt.Errorf("it has no match, and neither has rule %q of the same group; a group has one default rule", g.def.Name)
		}
		g.def = r
		return nil
	}
	err := register(g.mux, r.Match, ruleHandler{r})
	if err == nil {
		g.matched = append(g.matched, r)
		return nil
	}
	// ServeMux's message names the patterns, and where in this file they
	// were registered: name the rule instead, one pair at a time.
	for _, other := range g.matched {
		pair := http.NewServeMux()
		if register(pair, other.Match, ruleHandler{other}) != nil {
			continue
		}
		if err := register(pair, r.Match, ruleHandler{r}); err != nil {
			why := err.Error()
			if _, after, ok := strings.Cut(why, ":\n"); ok {
				why = after
			}
			return fmt.Errorf("match %q conflicts with the match %q of rule %q of the same group: %s",
				r.Match, other.Match, other.Name, strings.ReplaceAll(why, "\n", " "))
		}
	}
	return fmt.Errorf("match %q: %s", r.Match, strings.TrimPrefix(err.Error(), fmt.Sprintf("parsing %q: ", r.Match)))
}

// register adds pattern to mux, returning what ServeMux panics with for
// a malformed or conflicting pattern.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// Rules returns the set's rules, compiled (named limits, default cost),
// in the order given. They must not be modified.
func (s *RuleSet) Rules() []*Rule { return s.rules }

// Rule returns the rule called name, or nil.
func (s *RuleSet) Rule(name string) *Rule { return s.byName[name] }

// match returns the rule of every group that matches r, in group order.
// A request that ServeMux would redirect (an unclean path such as //login
// or /a/../login, or a missing trailing slash) is matched as the request
// it would be redirected to, so that its spelling cannot dodge its rule.
func (s *RuleSet) match(r *http.Request, into []*Rule) []*Rule {
	var candidates []string // computed once, for the groups that need them
	for _, g := range s.groups {
		rule := g.lookup(r, r.URL.Path)
		if rule == nil {
			if candidates == nil {
				candidates = alternatives(r.URL.Path)
			}
			for _, p := range candidates {
				if rule = g.lookup(r, p); rule != nil {
					break
				}
			}
		}
		if rule == nil {
			rule = g.def
		}
		if rule != nil {
			into = append(into, rule)
		}
	}
	return into
}

// lookup matches r, with its path replaced by p, against the group's
// patterns.
func (g *group) lookup(r *http.Request, p string) *Rule {
	if p != r.URL.Path {
		u := *r.URL
		u.Path, u.RawPath = p, ""
		r2 := *r
		r2.URL = &u
		r = &r2
	}
	h, _ := g.mux.Handler(r)
	if rh, ok := h.(ruleHandler); ok {
		return rh.r
	}
	return nil
}

// alternatives returns the paths ServeMux would redirect p to: p cleaned,
// and with a trailing slash, leaving out p itself.
func alternatives(p string) []string {
	clean := cleanPath(p)
	out := []string{}
	if clean != p {
		out = append(out, clean)
	}
	if !strings.HasSuffix(clean, "/") && clean+"/" != p {
		out = append(out, clean+"/")
	}
	return out
}

// cleanPath is path.Clean that keeps a trailing slash, as ServeMux cleans.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}
