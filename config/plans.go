package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/policy"
)

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
		p.missing(f.val.Line, f.path, "name", "is missing; every plan needs a name of %s", nameHelp)
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
			return fmt.Sprintf("plan %q", plans[i].Name)
		}
		return fmt.Sprintf("plans[%d]", i)
	}
	for j, pl := range plans {
		if pl.name.val != nil {
			if i, dup := names[pl.Name]; dup {
				p.errorf(pl.name.val.Line, pl.name.path, "%q is also the name of the plan at line %d; plan names are unique within a rule", pl.Name, plans[i].name.val.Line)
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
