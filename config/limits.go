package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
)

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
	needs := what + " needs limit and period, or a limits list"
	if single == nil && p.misspelt(owner.path, "limits") {
		needs = "" // a misspelt limits list, reported as such
	}
	l, ok := p.limitFrom(m, owner, needs)
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
			p.missing(owner.val.Line, owner.path, "limit", "is missing; %s", needs)
		}
		bad["limit"] = true
	}
	slots := algoOK && l.Algorithm == sluice.Concurrency
	switch e, ok := m["period"]; {
	case ok && slots:
		p.errorf(e.val.Line, e.path, "a concurrency limit has no period: it counts requests in flight; its slots' lease is ttl (default %s)", sluice.DefaultSlotTTL)
		bad["period"] = true
	case ok:
		d, ok := p.duration(e)
		l.Period, bad["period"] = d, !ok
	case slots:
	default:
		if needs != "" {
			p.missing(owner.val.Line, owner.path, "period", "is missing; %s", needs)
		}
		bad["period"] = true
	}
	if e, ok := m["ttl"]; ok {
		if algoOK && !slots {
			p.errorf(e.val.Line, e.path, "ttl is the lease of a concurrency limit's slots; %s has a period instead (leave ttl out)", l.Algorithm)
			bad["ttl"] = true
		} else if d, ok := p.duration(e); !ok {
			bad["ttl"] = true
		} else {
			l.Period = d
		}
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
	if bad["period"] || bad["ttl"] {
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
		if name == "period" && l.Algorithm == sluice.Concurrency {
			name = "ttl" // the lease, which Limit keeps in Period
		}
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
		case "period", "ttl":
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
// field: `rules "search".limit: must be at least 1`.
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
