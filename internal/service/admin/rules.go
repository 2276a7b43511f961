package admin

import (
	"cmp"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

// ConfigInfo says what configuration a Handler serves, in Stats.
type ConfigInfo struct {
	// Path is the file or directory it was read from.
	Path string `json:"path,omitempty"`
	// Kind is "policy" (a sluice policy file) or "envoy" (an
	// envoyproxy/ratelimit config).
	Kind string `json:"kind,omitempty"`
	// Summary says what it holds, such as "envoy config: 2 domains".
	Summary string `json:"summary,omitempty"`
}

// RuleInfo is one rule as the dashboard shows it.
type RuleInfo struct {
	// Name is the rule's name: the rule label of its decisions.
	Name string `json:"name"`
	// Group is the rule's group ("" the default group).
	Group string `json:"group,omitempty"`
	// Match is the requests it matches: a ServeMux pattern, an Envoy
	// descriptor path, or "" for every request (for a rule keyed by
	// request, none: it is checked by name).
	Match string `json:"match"`
	// Key is where the client key comes from: "ip", "header:X-Api-Key",
	// "query:k", "global", "request", or "descriptor" for Envoy.
	Key string `json:"key"`
	// Cost is what one request spends.
	Cost int `json:"cost"`
	// Shadow says the rule reports but never blocks.
	Shadow bool `json:"shadow"`
	// OnError is the rule's own error policy ("" the service's).
	OnError string `json:"on_error,omitempty"`
	// Limits are checked all or nothing.
	Limits []LimitInfo `json:"limits"`
	// Plans names the rule's plans (limits of their own for some keys).
	Plans []string `json:"plans,omitempty"`
	// Classes are the priority classes of a rule that sheds by class
	// (policy.Priority), highest first, the lowest last: those below the
	// highest may be shed (RuleSeries.Shed).
	Classes []string `json:"classes,omitempty"`
}

// LimitInfo is one limit of a RuleInfo.
type LimitInfo struct {
	// Name is the limit's name, such as "login-1m".
	Name string `json:"name"`
	// Algorithm is its algorithm, such as "token_bucket".
	Algorithm string `json:"algorithm"`
	// Limit is the requests admitted per period (a concurrency limit's:
	// in flight at once).
	Limit int `json:"limit"`
	// Period is the period as a policy file writes it ("1m"), and in
	// seconds (a concurrency limit's: its slots' lease).
	Period        string  `json:"period"`
	PeriodSeconds float64 `json:"period_seconds"`
	// Burst is the bucket's capacity (token_bucket and gcra only).
	Burst int `json:"burst,omitempty"`
}

// LimitOf describes l.
func LimitOf(l sluice.Limit) LimitInfo {
	n := l.Normalized()
	info := LimitInfo{Name: n.Name, Algorithm: n.Algorithm.String(), Limit: n.Limit, Period: policy.CompactDuration(n.Period), PeriodSeconds: n.Period.Seconds()}
	if n.Algorithm == sluice.TokenBucket || n.Algorithm == sluice.GCRA {
		info.Burst = n.Burst
	}
	return info
}

// RulesOf describes the rules of set, in its order.
func RulesOf(set *policy.RuleSet) []RuleInfo {
	if set == nil {
		return nil
	}
	out := make([]RuleInfo, 0, len(set.Rules()))
	for _, r := range set.Rules() {
		info := RuleInfo{Name: r.Name, Group: r.Group, Match: r.Match, Key: r.Key.String(), Cost: max(r.Cost, 1), Shadow: r.Shadow, OnError: r.OnError.String()}
		for _, l := range r.Limits {
			info.Limits = append(info.Limits, LimitOf(l))
		}
		for _, p := range r.Plans {
			info.Plans = append(info.Plans, p.Name)
		}
		if p := r.Priority; p != nil {
			for _, c := range p.Classes {
				info.Classes = append(info.Classes, c.Name)
			}
			info.Classes = append(info.Classes, cmp.Or(p.Default, policy.DefaultClass))
		}
		out = append(out, info)
	}
	return out
}
