package config

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// pattern returns the ServeMux pattern f, a rule's match, normalized.
func (p *parser) pattern(f field) (string, bool) {
	return p.servePattern(f, `write [METHOD ][HOST]/PATH, such as "GET /api/search" or "/api/{id}", or leave match out for the default rule`)
}

// servePattern returns the ServeMux pattern f, normalized; help says
// how to write one.
func (p *parser) servePattern(f field, help string) (string, bool) {
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
			p.errorf(info.line, join(info.path, "match"), "is missing here and in %s: only one rule%s may be the default rule (the one without match)", infos[def].ref(), inGroup)
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
			p.errorf(line, path, "%q is also the match of %s; one rule per pattern%s", pat, infos[j].ref(), strings.Replace(inGroup, " of", " in", 1))
			continue
		}
		seen[pat] = i
		if def >= 0 && matchesAll.MatchString(pat) {
			p.errorf(line, path, "%q matches every request, so %s, the default rule%s, would never apply; keep one of them", pat, infos[def].ref(), inGroup)
		}
		if register(mux, pat) == nil {
			registered = append(registered, i)
			continue
		}
		// Find the rules it conflicts with, one pair at a time.
		for _, j := range registered {
			other := normalizePattern(infos[j].match.val.Value)
			if why := conflict(other, pat); why != "" {
				p.errorf(line, path, "%q conflicts with the match %q of %s: %s", pat, other, infos[j].ref(), why)
			}
		}
	}
}

// conflict returns why ServeMux refuses to register pat beside other,
// or "" when it takes both (or refuses other alone).
func conflict(other, pat string) string {
	pair := http.NewServeMux()
	if register(pair, other) != nil {
		return ""
	}
	err := register(pair, pat)
	if err == nil {
		return ""
	}
	msg := err.Error()
	if _, why, ok := strings.Cut(msg, ":\n"); ok {
		msg = why
	}
	return strings.ReplaceAll(msg, "\n", " ")
}
