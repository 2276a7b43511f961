package config

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice/policy"
	"go.yaml.in/yaml/v3"
)

// routesHelp says how to write a priority route's pattern.
const routesHelp = `write [METHOD ][HOST]/PATH, such as "POST /api/checkout" or "/api/{id}"`

// priority returns a rule's priority section, nil when it is invalid.
// info is the rule's: keyed by request (byName), no route can match it;
// its plan, the rule it names, is checked against the others once they
// are read (checkPlanRefs). Every check of policy.Priority is made here,
// on the field it is about, so that the engine never has to report one
// against the whole file.
func (p *parser) priority(f field, info *ruleInfo) *policy.Priority {
	byName := info.byName
	m, ok := p.mapping(f, "priority", priorityFields, false)
	if !ok {
		return nil
	}
	pr := &policy.Priority{}
	good := true
	if e, ok := m["from"]; ok {
		if s, ok := p.str(e, "header:<Name> or query:<name>"); !ok {
			good = false
		} else {
			k, err := policy.ParseKey(s)
			switch {
			case err != nil:
				p.errorf(e.val.Line, e.path, "%v", err)
				good = false
			case k.Source != policy.KeyHeader && k.Source != policy.KeyQuery:
				p.errorf(e.val.Line, e.path, "%q: a class comes from a header or a query parameter (header:<Name> or query:<name>)", s)
				good = false
			default:
				pr.From = &k
			}
		}
	}
	if e, ok := m["plan"]; ok {
		if s, ok := p.name(e); !ok {
			good = false
		} else {
			pr.Plan, info.plan = s, e
		}
	}
	defaultOK := true
	if e, ok := m["default"]; ok {
		if s, ok := p.str(e, "the name of the lowest class"); !ok {
			defaultOK = false
		} else if !policy.ValidName(s) {
			p.errorf(e.val.Line, e.path, "%q is not a class name; a name holds %s", s, nameHelp)
			defaultOK = false
		} else {
			pr.Default = s
		}
	}
	classesOK := p.reserve(f, m, pr) && defaultOK
	good = good && classesOK
	if e, ok := m["routes"]; ok {
		good = p.priorityRoutes(e, pr, byName, classesOK) && good
	}
	if e, ok := m["status"]; ok {
		const want = "status is the HTTP status of a request shed, 400 to 599 (503 unless set)"
		switch n, ok := p.integer(e, want); {
		case !ok:
			good = false
		case n < 400 || n > 599:
			p.errorf(e.val.Line, e.path, "%d is no error status; %s", n, want)
			good = false
		default:
			pr.Status = n
		}
	}
	if !good {
		return nil
	}
	return pr
}

// lowest returns the name of pr's lowest class, and how the file names
// it, for messages.
func lowest(pr *policy.Priority) (name, how string) {
	if pr.Default == "" {
		return pr.Lowest(), fmt.Sprintf("%q, unless default names another", pr.Lowest())
	}
	return pr.Lowest(), fmt.Sprintf("%q, as default names it", pr.Default)
}

// reserve sets pr.Classes to the classes of the reserve of f, the
// priority section whose fields are m, in the order the file lists them,
// and reports whether they are valid: each a valid name, once, not the
// lowest class, with a percentage, all of them adding up to less than
// 100%.
func (p *parser) reserve(f field, m map[string]field, pr *policy.Priority) bool {
	const example = "{critical: 20%, high: 10%}"
	e, ok := m["reserve"]
	switch {
	case !ok:
		p.missing(f.val.Line, f.path, "reserve", "is missing; name the classes above the lowest, highest first, each with the share of capacity it keeps, such as %s", example)
		return false
	case e.val.Kind != yaml.MappingNode:
		p.errorf(e.val.Line, e.path, "must be a mapping of classes to shares, highest first, such as %s, not %s", example, show(e.val))
		return false
	case len(e.val.Content) == 0:
		p.errorf(e.val.Line, e.path, "is empty; name the classes above the lowest, highest first, each with the share of capacity it keeps, such as %s", example)
		return false
	}
	low, how := lowest(pr)
	good := true
	seen := map[string]int{} // class → line
	total := 0.0
	for i := 0; i+1 < len(e.val.Content); i += 2 {
		k, v := p.resolve(e.val.Content[i]), p.resolve(e.val.Content[i+1])
		path := join(e.path, k.Value)
		switch {
		case k.Kind != yaml.ScalarNode || !policy.ValidName(k.Value):
			p.errorf(k.Line, e.path, "%s is not a class name; a name holds %s", show(k), nameHelp)
			good = false
			continue
		case seen[k.Value] > 0:
			p.errorf(k.Line, path, "appears twice (first at line %d); keep one", seen[k.Value])
			good = false
			continue
		case k.Value == low:
			p.errorf(k.Line, path, "is the lowest class (%s), which reserves nothing: reserve lists the classes above it", how)
			good = false
		}
		seen[k.Value] = k.Line
		share, ok := p.percent(field{key: k, val: v, path: path})
		good = good && ok
		total += share
		pr.Classes = append(pr.Classes, policy.Class{Name: k.Value, Reserve: share})
	}
	if good && total >= 1 { // policy.Priority's sum, in the same order
		p.errorf(e.key.Line, e.path, "the shares add up to %s%%, which leaves the lowest class, %q, nothing; they must add up to less than 100%%",
			strconv.FormatFloat(math.Round(total*1e8)/1e6, 'f', -1, 64), low)
		good = false
	}
	return good
}

// percent returns the share a percentage such as 20% or 12.5% writes,
// as a fraction.
func (p *parser) percent(f field) (float64, bool) {
	s, ok := p.str(f, "a percentage such as 20%")
	if !ok {
		return 0, false
	}
	num, isPercent := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(num, 64)
	if !isPercent || err != nil || !(v > 0 && v < 100) {
		p.errorf(f.val.Line, f.path, "%q is not a percentage above 0%% and below 100%%, such as 20%% or 12.5%%", s)
		return 0, false
	}
	return v / 100, true
}

// priorityRoutes sets pr.Routes to the routes of e, a priority section's
// routes, normalized, and reports whether they are valid: each a
// ServeMux pattern that conflicts with no other route, mapped to one of
// pr's classes (which classesOK says are all valid, in which case a
// route's class that is none of them is reported). A rule keyed by
// request (byName) has no routes.
func (p *parser) priorityRoutes(e field, pr *policy.Priority, byName, classesOK bool) bool {
	switch {
	case e.val.Kind != yaml.MappingNode:
		p.errorf(e.val.Line, e.path, "must be a mapping of route patterns to classes, such as {\"POST /api/checkout\": critical}, not %s", show(e.val))
		return false
	case byName:
		p.errorf(e.key.Line, e.path, "%s; leave routes out, and let each check name its class", policy.CheckedByName)
		return false
	}
	var classes []string // the highest first, the lowest last
	for _, c := range pr.Shares() {
		classes = append(classes, c.Class)
	}
	good := true
	mux := http.NewServeMux()
	seen := map[string]int{} // pattern → line
	var registered []*yaml.Node
	for i := 0; i+1 < len(e.val.Content); i += 2 {
		k, v := p.resolve(e.val.Content[i]), p.resolve(e.val.Content[i+1])
		path := fmt.Sprintf("%s %q", e.path, k.Value)
		pat, ok := p.servePattern(field{key: k, val: k, path: path}, routesHelp)
		if !ok {
			good = false
			continue
		}
		if line, dup := seen[pat]; dup {
			p.errorf(k.Line, path, "%q is also the route at line %d; keep one", pat, line)
			good = false
			continue
		}
		seen[pat] = k.Line
		if register(mux, pat) != nil {
			for _, other := range registered {
				if why := conflict(normalizePattern(other.Value), pat); why != "" {
					p.errorf(k.Line, path, "%q conflicts with the route %q (line %d): %s", pat, normalizePattern(other.Value), other.Line, why)
				}
			}
			good = false
			continue
		}
		registered = append(registered, k)
		class, ok := p.str(field{key: k, val: v, path: path}, "a class: one of "+strings.Join(classes, ", "))
		switch {
		case !ok:
			good = false
		case !slices.Contains(classes, class):
			// Of classes that are not all valid, none is known to be
			// missing: the reserve's mistakes are reported already.
			if classesOK {
				p.errorf(v.Line, path, "class %q is not one of %s", class, strings.Join(classes, ", "))
			}
			good = false
		default:
			pr.Routes = append(pr.Routes, policy.PriorityRoute{Match: pat, Class: class})
		}
	}
	return good
}
