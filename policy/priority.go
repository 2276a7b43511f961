package policy

import (
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/sluice-go/sluice"
)

// Priority sheds load by class: it gives each request of a rule a class,
// and keeps a share of the rule's capacity for the classes above the
// lowest. With Classes [{critical, 0.2}], a request of any other class is
// denied once 80% of the rule's capacity is in use (80 of a concurrency
// limit's 100 slots, 80 of a window's 100 requests, 80 of a bucket's 100
// tokens), and a critical one until it is full. Each class decides under
// the rule's limits with its capacity cut to its share, in the same
// state (sluice.Limit.Identity), so that the classes draw on one pool.
//
// A request of a class below the highest that the rule denies is shed:
// the pool has no room left for its class (Applied.Shed), and it gets an
// HTTP status of its own (Status) and counts in sluice_shed_total{rule,
// class}. A denial of the highest class is an ordinary one.
type Priority struct {
	// From is where a request's class comes from: a header (KeyHeader)
	// or a query parameter (KeyQuery) whose value names it. nil: only
	// Routes give a class. A Check names its class (Check.Class).
	From *Key
	// Routes give the requests their patterns match a class, ahead of
	// From: the most specific match wins, as rules' patterns do.
	Routes []PriorityRoute
	// Plan names another rule whose plans give a class: a request whose
	// client key under that rule is on a plan named as one of Classes is
	// of that class (where From's value names none), so that a pool
	// shared by every client (a global rule) reserves its share for the
	// clients of a plan, as the plan rule knows them. "": none.
	Plan string
	// Classes are the classes above the lowest, highest first, each with
	// the share of the capacity it keeps for itself and the classes above
	// it. Their shares are each above 0 and together below 1.
	Classes []Class
	// Default names the lowest class: every request that no route, no
	// From value and no Plan puts in one of Classes. "" is "default".
	Default string
	// Status is the HTTP status of a shed request, 503 unless set: the
	// server sheds load, where a 429 tells a client that it sent too
	// many.
	Status int
}

// PriorityRoute gives the requests a pattern matches a class.
type PriorityRoute struct {
	// Match is a Go 1.22 http.ServeMux pattern.
	Match string
	// Class is one of the Priority's classes, or its Default.
	Class string
}

// A Class is a priority class above the lowest, and its reserve.
type Class struct {
	// Name is the class, as From's value or a route names it (ValidName).
	Name string
	// Reserve is the share of the capacity the class keeps for itself
	// and the classes above it, such as 0.2 for 20%.
	Reserve float64
}

// DefaultClass names the lowest class of a Priority without a Default.
const DefaultClass = "default"

// defaultName returns the name of p's lowest class.
func (p *Priority) defaultName() string {
	if p.Default == "" {
		return DefaultClass
	}
	return p.Default
}

// ShedStatus returns the HTTP status of a shed request: Status, or 503.
func (p *Priority) ShedStatus() int {
	if p.Status == 0 {
		return http.StatusServiceUnavailable
	}
	return p.Status
}

// classes returns p's class names, highest first, the lowest last.
func (p *Priority) classes() []string {
	names := make([]string, 0, len(p.Classes)+1)
	for _, c := range p.Classes {
		names = append(names, c.Name)
	}
	return append(names, p.defaultName())
}

// Lowest returns the name of p's lowest class: Default, or DefaultClass.
func (p *Priority) Lowest() string { return p.defaultName() }

// TooDear returns the first of limits (a rule's) that class could never
// spend cost from, though the whole limit could: its index, and the limit
// cut to the class's share (an unknown class is the lowest). ok is false
// when there is none.
func (p *Priority) TooDear(limits []sluice.Limit, class string, cost int) (i int, cut sluice.Limit, ok bool) {
	for i, l := range cutLimits(limits, p.share(p.index(class))) {
		if l.ValidateCost(cost) != nil && limits[i].ValidateCost(cost) == nil {
			return i, l, true
		}
	}
	return 0, sluice.Limit{}, false
}

// A ClassShare is a priority class and the share of its rule's capacity
// that its requests may use.
type ClassShare struct {
	Class string
	Share float64 // 1 for the highest class
}

// Shares returns p's classes, the highest first and the lowest
// (Default) last, each with its share of the rule's capacity.
func (p *Priority) Shares() []ClassShare {
	out := make([]ClassShare, 0, len(p.Classes)+1)
	for k, name := range p.classes() {
		out = append(out, ClassShare{Class: name, Share: p.share(k)})
	}
	return out
}

// index returns the index of class in p's classes, the lowest's (the
// last) for a name that is none of Classes.
func (p *Priority) index(class string) int {
	for i, c := range p.Classes {
		if c.Name == class {
			return i
		}
	}
	return len(p.Classes)
}

// share returns the share of the capacity that the class of index k
// may use: all of it less the reserves of the classes above it.
func (p *Priority) share(k int) float64 {
	s := 1.0
	for _, c := range p.Classes[:k] {
		s -= c.Reserve
	}
	return s
}

// check reports what is wrong with p, a rule's, and compiles its routes
// into a mux.
func (p *Priority) check(r *Rule) (*http.ServeMux, []error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("priority: "+format, args...)) }
	if f := p.From; f != nil && f.Source != KeyHeader && f.Source != KeyQuery {
		bad("from %s: a class comes from a header or a query parameter (header:<Name> or query:<name>)", f)
	}
	if f := p.From; f != nil && f.Source.Named() && f.Name == "" {
		bad("from %s has no name", f.Source)
	}
	if len(p.Classes) == 0 {
		bad("reserve holds no class; name at least one, such as {critical: 20%%}")
	}
	seen := map[string]bool{p.defaultName(): true}
	if !ValidName(p.defaultName()) {
		bad("default %q is not valid; a name holds %s", p.Default, NameChars)
	}
	total := 0.0
	for _, c := range p.Classes {
		switch {
		case !ValidName(c.Name):
			bad("class %q is not valid; a name holds %s", c.Name, NameChars)
		case seen[c.Name]:
			bad("class %q is named twice (the lowest class is %q)", c.Name, p.defaultName())
		}
		seen[c.Name] = true
		if !(c.Reserve > 0 && c.Reserve < 1) {
			bad("class %q reserves %v%% of the capacity; a reserve is above 0%% and below 100%%", c.Name, c.Reserve*100)
		}
		total += c.Reserve
	}
	if total >= 1 {
		bad("the reserves add up to %v%%, which leaves the lowest class nothing; they must add up to less than 100%%", total*100)
	}
	if p.Status != 0 && (p.Status < 400 || p.Status > 599) {
		bad("status %d is no error status (400 to 599)", p.Status)
	}
	if len(r.Plans) > 0 {
		bad("a rule that sheds by class has no plans: the classes share the rule's limits")
	}
	if r.Key.Source == KeyRequest && len(p.Routes) > 0 {
		bad("routes: %s", CheckedByName)
	}
	var mux *http.ServeMux
	if len(p.Routes) > 0 {
		mux = http.NewServeMux()
	}
	for i, rt := range p.Routes {
		if !seen[rt.Class] {
			bad("routes[%d]: class %q is not one of %s", i, rt.Class, strings.Join(p.classes(), ", "))
		}
		if err := register(mux, rt.Match, classHandler(p.index(rt.Class))); err != nil {
			bad("routes[%d]: %v", i, err)
		}
	}
	return mux, errs
}

// classHandler is what a Priority's route mux returns: the class's
// index.
type classHandler int

func (classHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// compiled is what Compile works out of a rule's Priority: the rule's
// limits cut to each class's share, and its routes.
type compiled struct {
	limits [][]sluice.Limit // by class index, the lowest last
	routes *http.ServeMux   // nil: none
}

// cutLimits returns limits with their capacity cut to share of it: the
// Burst of a bucket (its rate stays), the Limit of the others, at least
// 1.
func cutLimits(limits []sluice.Limit, share float64) []sluice.Limit {
	out := make([]sluice.Limit, len(limits))
	for i, l := range limits {
		// share is 1 less the reserves above, which a float64 may put a
		// hair below the exact share (1 - 0.9 is 0.09999...): a relative
		// nudge far above that error, and far below one unit of any
		// capacity, keeps 10% of 100 at 10.
		x := float64(l.Capacity()) * share
		c := max(int(math.Floor(x+x*1e-9)), 1)
		switch l.Algorithm {
		case "", sluice.TokenBucket, sluice.GCRA:
			l.Burst = c
		default:
			l.Limit = c
		}
		out[i] = l
	}
	return out
}

// compile returns p's classes' limits for the rule's limits, and its
// routes.
func (p *Priority) compile(limits []sluice.Limit, routes *http.ServeMux) *compiled {
	c := &compiled{routes: routes}
	for k := range len(p.Classes) + 1 {
		c.limits = append(c.limits, cutLimits(limits, p.share(k)))
	}
	c.limits[0] = limits // the highest class uses the whole capacity
	return c
}

// classOf returns the index of the class of r under rule: its route's,
// else its From value's, else that of its client's plan under the rule
// p.Plan names, else the lowest.
func (s *RuleSet) classOf(rule *Rule, r *http.Request) int {
	p := rule.Priority
	if mux := rule.priority.routes; mux != nil {
		if h, pattern := mux.Handler(r); pattern != "" {
			return int(h.(classHandler))
		}
	}
	lowest := len(p.Classes)
	if f := p.From; f != nil {
		var k int
		switch f.Source {
		case KeyHeader:
			k = p.index(r.Header.Get(f.Name))
		case KeyQuery:
			k = p.index(r.URL.Query().Get(f.Name))
		}
		if k != lowest {
			return k
		}
	}
	if p.Plan != "" {
		planRule := s.byName[p.Plan]
		if key, _, ok, err := s.httpKey(r, planRule); ok && err == nil {
			return p.index(planRule.PlanFor(key))
		}
	}
	return lowest
}

// checkPlan reports what is wrong with the rule p.Plan names, of the
// rules of s: there must be one, with plans, keyed by the request.
func (p *Priority) checkPlan(s *RuleSet) error {
	other := s.byName[p.Plan]
	switch {
	case other == nil:
		return fmt.Errorf("priority: plan %q names no rule; it names the rule whose plans give a class", p.Plan)
	case len(other.Plans) == 0:
		return fmt.Errorf("priority: plan %q names a rule without plans", p.Plan)
	case other.Key.Source == KeyRequest:
		return fmt.Errorf("priority: plan %q names a rule that %s: a request has no key for it", p.Plan, CheckedByName)
	}
	return nil
}

// classify puts a in the class of index k of its rule: its limits cut to
// the class's share.
func (a *Applied) classify(k int) {
	p := a.Rule.Priority
	a.Class = p.classes()[k]
	a.Limits = a.Rule.priority.limits[k]
}

// shed reports whether a, denied by its own limits, is shed: its rule
// sheds by class, and its class is below the highest, which may use the
// whole pool.
func (a *Applied) shed() bool {
	p := a.Rule.Priority
	return p != nil && a.Class != "" && a.Class != p.classes()[0] && !sluice.Combine(a.Results).Allowed
}
