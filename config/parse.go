package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/policy"
)

// The fields each mapping accepts, in documentation order.
var (
	fileFields     = []string{"redis", "memory", "http", "rules"}
	redisFields    = []string{"url", "on_error", "timeout", "replicas", "deny_cache", "batch", "wait_replicas", "wait_timeout"}
	memoryFields   = []string{"max_keys"}
	httpFields     = []string{"headers", "problem_json", "policy_key", "trusted_proxies", "ipv6_prefix"}
	ruleFields     = []string{"name", "group", "match", "key", "missing_key", "algorithm", "limit", "period", "ttl", "retry_after", "burst", "limits", "cost", "settle", "lease", "shadow", "on_error", "plans", "priority"}
	settleFields   = []string{"cost_from", "reserve", "postpaid", "strip"}
	priorityFields = []string{"from", "reserve", "routes", "plan", "default", "status"}
	leaseFields    = []string{"block"}
	limitFields    = []string{"algorithm", "limit", "period", "ttl", "burst"}
	planFields     = []string{"name", "keys", "prefixes", "algorithm", "limit", "period", "ttl", "burst", "limits"}
)

// parser walks the YAML node tree of one file, collecting every error.
type parser struct {
	file string
	errs Errors
	// budget bounds the nodes visited: aliases can make a small file
	// expand enormously (a "billion laughs"), and merge keys can loop.
	budget int
	// merging holds the mappings being collected, to catch a merge key
	// that includes the mapping it is in.
	merging map[*yaml.Node]bool
	// typos holds the fields (their paths) that an unknown field of
	// their mapping is a near-miss of: reported as "did you mean", so not
	// again as missing (see missing).
	typos map[string]bool
	// leases holds the block of each limit (by name) of a rule with a
	// lease section: File.Leases.
	leases map[string]int
}

// spent stands for every node once the budget is spent: an empty value,
// which ends the walk quickly.
var spent = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}

// field is one value of the file and where it is.
type field struct {
	key  *yaml.Node // the mapping key; nil for a list item or the root
	val  *yaml.Node // the value, aliases resolved
	path string     // such as rules "search".limits[0].period (see named)
}

// errorf records an error, unless the budget is spent: what the walk
// finds then is an artifact of the stand-in values.
func (p *parser) errorf(line int, path, format string, args ...any) {
	if p.budget < 0 {
		return
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// sort orders the errors by line, keeping the order of those on one line.
func (p *parser) sort() {
	sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
}

// resolve follows aliases and spends one unit of the budget.
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	if p.budget == 0 {
		p.errorf(n.Line, "", "aliases expand the file too much: refer to fewer aliases (*name), or to smaller ones")
	}
	if p.budget--; p.budget < 0 {
		return spent
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// parse returns the File of data, or nil with p.errs set.
func (p *parser) parse(data []byte) *File {
	doc, err := decodeYAML(data)
	if err != nil {
		p.syntax(data, err)
		return nil
	}
	if doc == nil || len(doc.Content) == 0 {
		p.errorf(0, "rules", "is missing: the file is empty, and a policy file needs at least one rule")
		return nil
	}
	root := p.resolve(doc.Content[0])
	if isNull(root) {
		p.errorf(root.Line, "rules", "is missing: the file is empty, and a policy file needs at least one rule")
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "", "the file must be a mapping with the keys %s, not %s", strings.Join(fileFields, ", "), show(root))
		return nil
	}
	m := p.fields(root, "", "the file", fileFields)
	f := &File{
		Redis:  p.redis(m["redis"]),
		Memory: p.memory(m["memory"]),
		HTTP:   p.http(m["http"]),
	}
	if e, ok := m["rules"]; ok {
		f.Rules, f.Lines = p.rules(e)
		f.Leases = p.leases
	} else {
		p.missing(root.Line, "", "rules", "is missing: a policy file needs at least one rule")
	}
	if len(p.errs) > 0 {
		return nil
	}
	// The engine checks rules made in code; a file that passed the checks
	// above must pass its too. Should they ever disagree, say so rather
	// than hand out a file the engine refuses.
	if _, err := f.Compile(); err != nil {
		p.errorf(m["rules"].val.Line, "rules", "%v", err)
		return nil
	}
	return f
}

// decodeYAML returns the file's one document, nil for an empty file.
func decodeYAML(data []byte) (doc *yaml.Node, err error) {
	defer func() {
		// The YAML library must not take the program down for a bad
		// file; report what it panicked with as a syntax error.
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if err == io.EOF {
			return nil, nil
		}
		return nil, err
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == io.EOF:
	case err != nil:
		return nil, err
	default:
		return nil, &extraDocError{line: next.Line}
	}
	return &n, nil
}

// extraDocError reports a second YAML document in the file.
type extraDocError struct{ line int }

func (e *extraDocError) Error() string { return "extra document" }

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntax records err, from the YAML library parsing data.
func (p *parser) syntax(data []byte, err error) {
	e := syntaxError(p.file, data, err)
	p.errorf(e.Line, "", "%s", e.Msg)
}

// DecodeYAML parses data, the content of the configuration file named
// file, as one YAML document: nil for an empty file. A syntax error is
// an *Error naming the line where the error is (not where the YAML
// library says, which is often where the enclosing block starts) with a
// hint at the usual cause; a second document is an error too. The
// envoyproxy/ratelimit files of package envoy are read with it, so that
// both kinds of file report bad YAML alike.
func DecodeYAML(file string, data []byte) (*yaml.Node, error) {
	doc, err := decodeYAML(data)
	if err != nil {
		return nil, syntaxError(file, data, err)
	}
	return doc, nil
}

// syntaxError is the *Error of err, from the YAML library parsing data.
func syntaxError(file string, data []byte, err error) *Error {
	var extra *extraDocError
	if errors.As(err, &extra) {
		return &Error{File: file, Line: extra.line, Msg: "a second YAML document (---) starts here; a configuration file is one document"}
	}
	msg, line := yamlMessage(err)
	if l := syntaxLine(data, msg); l > 0 {
		line = l
	}
	return &Error{File: file, Line: line, Msg: fmt.Sprintf("invalid YAML: %s%s", msg, syntaxHint(data, line, msg))}
}

// syntaxHint guesses the usual cause of a syntax error.
func syntaxHint(data []byte, line int, msg string) string {
	text := ""
	if lines := bytes.Split(data, []byte("\n")); line > 0 && line <= len(lines) {
		text = string(lines[line-1])
	}
	switch {
	case strings.HasPrefix(strings.TrimLeft(text, " "), "\t"):
		return " (indent with spaces: YAML does not allow tabs)"
	case msg == "did not find expected key" || msg == "did not find expected '-' indicator":
		return " (check the indentation of this line)"
	case msg == "mapping values are not allowed in this context":
		return ` (a value that holds ": " needs quotes)`
	}
	return ""
}

// yamlMessage splits an error of the YAML library into its message and the
// line it names, if any.
func yamlMessage(err error) (msg string, line int) {
	msg = strings.ReplaceAll(err.Error(), "\n", " ")
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	return strings.TrimPrefix(msg, "yaml: "), line
}

// syntaxLine returns the line of the syntax error msg in data, or 0.
//
// The YAML library names the line where the enclosing block starts, and
// counts from 0 for most errors. The first line with the error is the
// last line of the shortest prefix of data, cut at a line end, that fails
// with the same message: found by bisection, taking the prefixes that
// fail alike to be those past the error.
func syntaxLine(data []byte, msg string) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	same := func(k int) bool {
		_, err := decodeYAML(bytes.Join(lines[:k], nil))
		if err == nil {
			return false
		}
		m, _ := yamlMessage(err)
		return m == msg
	}
	lo, hi := 1, len(lines)
	if !same(hi) {
		return 0
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if same(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// fields returns the entries of mapping n by key. It reports keys that
// appear twice and keys not in known, and applies merge keys (<<: *base),
// whose entries yield to the mapping's own. At the top level, keys that
// start with "x-" are ignored, to hold anchors.
func (p *parser) fields(n *yaml.Node, path, what string, known []string) map[string]field {
	m := map[string]field{}
	p.collect(n, path, what, known, m, true)
	for name, f := range m {
		if f.val == nil {
			delete(m, name) // unknown: reported, and not a value
		}
	}
	return m
}

func (p *parser) collect(n *yaml.Node, path, what string, known []string, m map[string]field, own bool) {
	if p.merging[n] {
		p.errorf(n.Line, join(path, "<<"), "merges a mapping that includes it")
		return
	}
	if p.merging == nil {
		p.merging = map[*yaml.Node]bool{}
	}
	p.merging[n] = true
	defer delete(p.merging, n)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := p.resolve(n.Content[i])
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, n.Content[i+1])
			continue
		}
		name := k.Value
		if k.Kind != yaml.ScalarNode {
			name = show(k)
		}
		fp := join(path, name)
		if path == "" && strings.HasPrefix(name, "x-") {
			continue
		}
		if prev, dup := m[name]; dup {
			if own {
				p.errorf(k.Line, fp, "appears twice (first at line %d); keep one", prev.key.Line)
			}
			continue
		}
		if !slices.Contains(known, name) {
			shown := name
			if k.Kind == yaml.ScalarNode {
				shown = strconv.Quote(name)
			}
			msg := "unknown field " + shown
			if s := suggest(name, known); s != "" {
				// One mistake, one error: the field it misspells is not
				// reported missing too.
				msg += fmt.Sprintf(" (did you mean %q?)", s)
				if p.typos == nil {
					p.typos = map[string]bool{}
				}
				p.typos[join(path, s)] = true
			} else {
				msg += fmt.Sprintf("; %s takes %s", what, strings.Join(known, ", "))
				if path == "" {
					msg += ", and x-... fields to hold anchors"
				}
			}
			p.errorf(k.Line, path, "%s", msg)
			m[name] = field{key: k} // report it once
			continue
		}
		m[name] = field{key: k, val: p.resolve(n.Content[i+1]), path: fp}
	}
	for _, v := range merges {
		v = p.resolve(v)
		switch v.Kind {
		case yaml.MappingNode:
			p.collect(v, path, what, known, m, false)
		case yaml.SequenceNode:
			for _, item := range v.Content {
				if item = p.resolve(item); item.Kind == yaml.MappingNode {
					p.collect(item, path, what, known, m, false)
				} else {
					p.errorf(item.Line, join(path, "<<"), "merges a mapping or a list of mappings, not %s", show(item))
				}
			}
		default:
			p.errorf(v.Line, join(path, "<<"), "merges a mapping or a list of mappings, not %s", show(v))
		}
	}
}

// missing reports that the field name of the mapping at path, on line,
// is missing, unless an unknown field of the mapping is a near-miss of
// it: that mistake is reported once, as the unknown field (did you mean
// name?). It returns whether it reported.
func (p *parser) missing(line int, path, name, format string, args ...any) bool {
	if p.misspelt(path, name) {
		return false
	}
	p.errorf(line, join(path, name), format, args...)
	return true
}

// misspelt reports whether an unknown field of the mapping at path is a
// near-miss of the field name.
func (p *parser) misspelt(path, name string) bool { return p.typos[join(path, name)] }

// named returns the path of item, an item of the list at path list, by
// its name when it is a mapping with a valid one (rules "search"), so
// that messages name a rule or plan as its author does; else by its
// index (rules[2]).
func named(list string, item field) string {
	if item.val.Kind != yaml.MappingNode {
		return item.path
	}
	for i := 0; i+1 < len(item.val.Content); i += 2 {
		k, v := item.val.Content[i], item.val.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value != "name" {
			continue
		}
		for n := 0; v.Kind == yaml.AliasNode && v.Alias != nil && n < 8; n++ {
			v = v.Alias
		}
		if v.Kind == yaml.ScalarNode && !isNull(v) && policy.ValidName(v.Value) {
			return fmt.Sprintf("%s %q", list, v.Value)
		}
		break // the first name is the one the rule gets
	}
	return item.path
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// mapping returns the fields of the mapping f. A null value is an empty
// mapping when nullOK (a section with nothing under it).
func (p *parser) mapping(f field, what string, known []string, nullOK bool) (map[string]field, bool) {
	switch {
	case isNull(f.val) && nullOK:
		return map[string]field{}, true
	case f.val.Kind == yaml.MappingNode:
		return p.fields(f.val, f.path, what, known), true
	}
	p.errorf(f.val.Line, f.path, "must be a mapping with the keys %s, not %s", strings.Join(known, ", "), show(f.val))
	return nil, false
}

// list returns the items of the list f; a null value is an empty list.
func (p *parser) list(f field, want string) ([]field, bool) {
	switch {
	case isNull(f.val):
		return nil, true
	case f.val.Kind == yaml.SequenceNode:
		items := make([]field, len(f.val.Content))
		for i, n := range f.val.Content {
			items[i] = field{val: p.resolve(n), path: fmt.Sprintf("%s[%d]", f.path, i)}
		}
		return items, true
	}
	p.errorf(f.val.Line, f.path, "must be a list of %s, not %s", want, show(f.val))
	return nil, false
}

// str returns the text of the scalar f; want says what is accepted.
func (p *parser) str(f field, want string) (string, bool) {
	if f.val.Kind != yaml.ScalarNode || isNull(f.val) {
		p.errorf(f.val.Line, f.path, "must be %s, not %s", want, show(f.val))
		return "", false
	}
	return f.val.Value, true
}

// oneOf returns the scalar f if it is one of allowed.
func (p *parser) oneOf(f field, allowed ...string) (string, bool) {
	want := "one of " + strings.Join(allowed, ", ")
	s, ok := p.str(f, want)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		p.errorf(f.val.Line, f.path, "%q is not %s", s, want)
		return "", false
	}
	return s, true
}

// integer returns the whole number f; want says what is accepted.
func (p *parser) integer(f field, want string) (int, bool) {
	v := f.val
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		p.errorf(v.Line, f.path, "%s is not a whole number; %s", show(v), want)
		return 0, false
	}
	var n int64
	if err := v.Decode(&n); err != nil || int64(int(n)) != n {
		p.errorf(v.Line, f.path, "%s is out of range; %s", v.Value, want)
		return 0, false
	}
	return int(n), true
}

const durationHelp = "write a Go duration such as 500ms, 1s, 1m, 1h or 1h30m"

// duration returns the Go duration f.
func (p *parser) duration(f field) (time.Duration, bool) {
	v := f.val
	switch {
	case v.Kind == yaml.ScalarNode && (v.Tag == "!!int" || v.Tag == "!!float"):
		p.errorf(v.Line, f.path, "%s has no unit; %s", v.Value, durationHelp)
		return 0, false
	case v.Kind != yaml.ScalarNode || v.Tag != "!!str":
		p.errorf(v.Line, f.path, "%s is not a duration; %s", show(v), durationHelp)
		return 0, false
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		help := durationHelp
		if strings.HasSuffix(v.Value, "d") || strings.HasSuffix(v.Value, "w") {
			help += " (a day is 24h)"
		}
		p.errorf(v.Line, f.path, "%q is not a duration; %s", v.Value, help)
		return 0, false
	}
	return d, true
}

// boolean returns the true or false of f.
func (p *parser) boolean(f field) (bool, bool) {
	v := f.val
	var b bool
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&b) != nil {
		p.errorf(v.Line, f.path, "%s is not a boolean; write true or false", show(v))
		return false, false
	}
	return b, true
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" || n.Kind == 0
}

// show describes a node in a message: a quoted string, a number as
// written, or its kind.
func show(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n):
		return "an empty value"
	case n.Kind != yaml.ScalarNode:
		return "an alias"
	}
	s := n.Value
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	if n.Tag == "!!str" || strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return strconv.Quote(s)
	}
	return s
}

// suggest returns the name in known closest to name, if it is close
// enough to be a typo.
func suggest(name string, known []string) string {
	best, bestDist := "", 3
	if len(name) <= 3 {
		bestDist = 2
	}
	for _, k := range known {
		if d := distance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// distance returns the Levenshtein distance between a and b.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
