package config

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/lease"
)

const nameHelp = policy.NameChars

// ruleInfo is what the checks across rules need of a rule.
type ruleInfo struct {
	index     int    // in the rules list
	path      string // rules "name", or rules[index] (see named)
	line      int
	name      field // name.val == nil: missing or invalid
	match     field // match.val == nil: the default rule, or invalid
	group     string
	groupOK   bool // false: the group is invalid, and the rule in none
	isDefault bool
	byName    bool  // keyed by request: checked by name, in no group
	plan      field // its priority's plan, the rule it names (val nil: none)
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
		item.path = named(f.path, item)
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
		if !info.groupOK || info.byName {
			continue // its group is reported, or it has none; no other rule can clash with it
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
	p.checkPlanRefs(rules, infos)
	return rules, lines
}

// checkPlanRefs reports a priority's plan that names no rule of the file
// with plans, or one keyed by request (a request has no key for it).
func (p *parser) checkPlanRefs(rules []policy.Rule, infos []ruleInfo) {
	for _, info := range infos {
		f := info.plan
		if f.val == nil {
			continue
		}
		i := slices.IndexFunc(rules, func(r policy.Rule) bool { return r.Name == f.val.Value })
		switch {
		case i < 0:
			p.errorf(f.val.Line, f.path, "%q is no rule of the file; plan names the rule whose plans give a client's class", f.val.Value)
		case len(rules[i].Plans) == 0:
			p.errorf(f.val.Line, f.path, "rule %q has no plans to give a class", f.val.Value)
		case infos[i].byName:
			p.errorf(f.val.Line, f.path, "rule %q is keyed by request: a request has no key for it", f.val.Value)
		}
	}
}

// ref names the rule in a message about another: rule "search" (line
// 3), or rules[2] (line 3) when it has no valid name.
func (info ruleInfo) ref() string {
	if info.name.val != nil {
		return fmt.Sprintf("rule %q (line %d)", info.name.val.Value, info.line)
	}
	return fmt.Sprintf("rules[%d] (line %d)", info.index, info.line)
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
		p.missing(info.line, f.path, "name", "is missing; every rule needs a name of %s", nameHelp)
	}
	keyOK := true
	if e, ok := m["key"]; ok {
		keyOK = false
		if s, ok := p.str(e, "one of "+policy.KeySpecs); ok {
			if k, err := policy.ParseKey(s); err != nil {
				p.errorf(e.val.Line, e.path, "%v", err)
			} else {
				r.Key, keyOK = k, true
			}
		}
	}
	if keyOK && r.Key.Source == policy.KeyRequest {
		// Checked by name, in no group: its match and group are
		// mistakes, whatever they say.
		info.byName = true
		if e, ok := m["match"]; ok {
			p.errorf(e.val.Line, e.path, "%s; leave match out, or key the rule by %s", policy.CheckedByName, policy.MatchedKeySpecs)
		}
		if e, ok := m["group"]; ok {
			p.errorf(e.val.Line, e.path, "%s, and in no group; leave group out", policy.CheckedByName)
		}
	} else {
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
			// A misspelt match is reported as such, not as a second
			// default.
			info.isDefault = !p.misspelt(f.path, "match")
		}
	}
	if e, ok := m["missing_key"]; ok {
		if s, ok := p.oneOf(e, policy.MissingKeyNames[:]...); ok {
			r.MissingKey = policy.MissingKey(slices.Index(policy.MissingKeyNames[:], s))
			if keyOK && !r.Key.Source.Named() {
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
	if e, ok := m["settle"]; ok {
		var reserve field
		var reserveOK bool
		r.Settle, r.Cost, reserve, reserveOK = p.settle(e)
		if hasCost {
			p.errorf(cost.key.Line, cost.path, "is the reserve of a rule that settles; leave cost out and set settle.reserve, or settle.postpaid")
		}
		cost, hasCost, costOK = reserve, reserveOK, reserveOK
		if r.Cost == 0 {
			r.Cost = 1
		}
	}
	leaseBlock, leaseAt := 0, field{}
	if e, ok := m["lease"]; ok {
		leaseBlock, leaseAt = p.lease(e)
	}
	if e, ok := m["shadow"]; ok {
		r.Shadow, _ = p.boolean(e)
	}
	prio, hasPrio := m["priority"]
	if hasPrio {
		r.Priority = p.priority(prio, &info)
	}
	if e, ok := m["on_error"]; ok {
		if s, ok := p.oneOf(e, sluice.OutagePolicies...); ok {
			// Its local fallback is the store's (see sluice.Part.OnError).
			r.OnError, _ = sluice.ParseErrorPolicy(s, nil)
		}
	}
	var plans []planInfo
	if e, ok := m["plans"]; ok {
		items, _ := p.list(e, "plans")
		for _, item := range items {
			item.path = named(e.path, item)
			pl := p.plan(item)
			plans = append(plans, pl)
			r.Plans = append(r.Plans, pl.Plan)
		}
		p.checkPlans(plans)
		if hasPrio {
			p.errorf(prio.key.Line, prio.path, "a rule that sheds by class has no plans: its classes share the rule's limits, where a plan gives some clients limits of their own; leave out plans or priority")
		}
	}

	// Names come last: they use the rule's name, and only valid limits
	// have a compact period.
	r = r.WithLimitNames()
	if leaseBlock > 0 {
		lists := [][]sluice.Limit{}
		if limitsOK {
			lists = append(lists, r.Limits)
		}
		for i, pl := range plans {
			if pl.limitsOK {
				lists = append(lists, r.Plans[i].Limits)
			}
		}
		p.addLease(leaseAt, leaseBlock, lists)
	}
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
		if pr := r.Priority; pr != nil && limitsOK {
			if i, cut, ok := pr.TooDear(r.Limits, pr.Lowest(), r.Cost); ok {
				p.errorf(cost.val.Line, cost.path, "%d is more than the lowest class, %q, may use of limit %s (%d of %d): its requests could never be admitted; lower the cost or the reserves", r.Cost, pr.Lowest(), r.Limits[i].Name, cut.Capacity(), r.Limits[i].Capacity())
			}
		}
	}
	if e, ok := m["retry_after"]; ok {
		slots := func(l sluice.Limit) bool { return l.Algorithm == sluice.Concurrency }
		switch d, ok := p.duration(e); {
		case !ok:
		case d <= 0:
			p.errorf(e.val.Line, e.path, "%s: the wait a denial by the rule's concurrency limit suggests is above 0", d)
		case limitsOK && !slices.ContainsFunc(r.Limits, slots):
			p.errorf(e.val.Line, e.path, "is the wait a denial by a concurrency limit suggests, and the rule has none (a rate limit's Retry-After is exact)")
		default:
			r.RetryAfter = d
		}
	}
	return r, info
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
			p.errorf(info.name.val.Line, info.name.path, "%q is also the name of the rule at line %d; rule names are unique", name, infos[j].line)
			continue
		}
		seen[name] = i
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
				p.errorf(infos[i].name.val.Line, infos[i].name.path, "gives a limit the name %q, which a limit of %s has too (names are <rule>-[<plan>-]<period>); rename one of the rules or plans",
					name, infos[j].ref())
				break
			}
			seen[name] = i
		}
	}
}

// settle returns a rule's settle section, the rule's cost (its reserve, 1
// when post-paid) and the field that sets it, for checkCost: ok when it
// is a reserve to check.
func (p *parser) settle(f field) (st *policy.Settle, cost int, reserve field, ok bool) {
	m, ok := p.mapping(f, "settle", settleFields, false)
	if !ok {
		return nil, 0, field{}, false
	}
	st = &policy.Settle{}
	if e, ok := m["cost_from"]; ok {
		if s, ok := p.str(e, policy.CostSourceSpecs); ok {
			if c, err := policy.ParseCostSource(s); err != nil {
				p.errorf(e.val.Line, e.path, "%v", err)
			} else {
				st.CostFrom = c
			}
		}
	} else {
		p.missing(f.val.Line, f.path, "cost_from", "is missing; say where a response reports its cost: %s", policy.CostSourceSpecs)
	}
	if e, ok := m["strip"]; ok {
		st.Strip, _ = p.boolean(e)
		if st.Strip && st.CostFrom.Header == "" && m["cost_from"].val != nil {
			p.errorf(e.val.Line, e.path, "applies to a cost read from a header; cost_from bytes has none to strip")
		}
	}
	postpaid := false
	pe, hasPostpaid := m["postpaid"]
	if hasPostpaid {
		postpaid, _ = p.boolean(pe)
	}
	re, hasReserve := m["reserve"]
	switch {
	case hasReserve && postpaid:
		p.errorf(pe.val.Line, pe.path, "admits a request while the balance holds one unit, so it reserves 1; leave out reserve or postpaid")
	case hasReserve:
		n, ok := p.integer(re, "reserve is what a request is admitted at and holds until settled, at least 1")
		if !ok {
			return st, 0, field{}, false
		}
		if n < 1 {
			p.errorf(re.val.Line, re.path, "must be at least 1, got %d", n)
			return st, 0, field{}, false
		}
		return st, n, re, true
	case !postpaid:
		p.missing(f.val.Line, f.path, "reserve", "is missing; set reserve (what a request is admitted at: the most its work may cost) or postpaid: true (admitted while the balance holds one unit, charged after)")
	}
	return st, 1, field{}, false
}

// lease returns a rule's lease block, 0 when the section is invalid, and
// the field of the block for messages.
func (p *parser) lease(f field) (int, field) {
	m, ok := p.mapping(f, "lease", leaseFields, false)
	if !ok {
		return 0, field{}
	}
	e, ok := m["block"]
	if !ok {
		p.missing(f.val.Line, f.path, "block", "is missing; a lease takes block units of a key's quota at once, at least 1")
		return 0, field{}
	}
	n, ok := p.integer(e, "block is how many units a replica takes at once, at least 1")
	if !ok {
		return 0, field{}
	}
	if n < 1 {
		p.errorf(e.val.Line, e.path, "must be at least 1, got %d", n)
		return 0, field{}
	}
	return n, e
}

// addLease records block for the limit of each of lists (the rule's and
// each plan's), each of which must be one limit of a capacity of at
// least lease.DefaultMinCapacityBlocks blocks.
func (p *parser) addLease(f field, block int, lists [][]sluice.Limit) {
	for _, ls := range lists {
		if len(ls) != 1 {
			p.errorf(f.val.Line, f.path, "leases a rule of one limit, and this rule (or a plan) has %d: a request under several limits is decided all or nothing in the store", len(ls))
			return
		}
		if c := ls[0].Capacity(); block*lease.DefaultMinCapacityBlocks > c {
			p.errorf(f.val.Line, f.path, "%d is more than a tenth of the capacity %d of limit %s: a block so large hands most of the limit to one replica; use a block of at most %d", block, c, ls[0].Name, c/lease.DefaultMinCapacityBlocks)
			return
		}
	}
	if p.leases == nil {
		p.leases = map[string]int{}
	}
	for _, ls := range lists {
		p.leases[ls[0].Name] = block
	}
}
