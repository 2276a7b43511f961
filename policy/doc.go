// Package policy is sluice's policy engine: the one place where a rule is
// decided, whichever door a request comes through.
//
// A RuleSet is a compiled, validated set of rules, built from rules made in
// code (Compile) or read from a policy file (package config, whose
// File.Compile applies the file's key settings). An Engine decides under
// a RuleSet with a sluice.Limiter:
//
//   - Decide takes an *http.Request (the net/http middleware, the reverse
//     proxy): it matches the request to the rules, names the client by
//     each rule's key source, picks each rule's plan, and decides.
//   - Check takes rules by name with a client key the caller already
//     knows (the decision service's POST /v1/check, Envoy's descriptors).
//
// Both make one call of the Limiter for every rule that applies, and
// return a Decision: allowed or not, each rule's limits and Results, the
// binding limit, the rule whose key the request lacked, and whether the
// store failed and which error policy answered instead.
//
// For operators, Inspect reads a client's state under a rule, limit by
// limit, and what a request of some cost would get, spending nothing
// (sluice.Limiter.Peek); Reset forgets it. Denials are logged at a sampled
// rate (WithDenialLog), client keys masked (MaskKey).
//
// # Groups: stacked rules
//
// Rules belong to groups (Rule.Group; "" is the default group). Within a
// group the most specific rule whose http.ServeMux pattern matches applies,
// with ServeMux's precedence, and the group's rule without a pattern takes
// the requests no other rule of the group matches. Every group applies on
// its own, so one request can be limited per address, per API key and as a
// login at once:
//
//	rules:
//	  - {name: per-ip, key: ip, limit: 100, period: 1s}
//	  - {name: per-key, group: keys, match: /api/, key: header:X-API-Key, limit: 1000, period: 1h}
//	  - {name: login, group: auth, match: POST /api/auth/login, key: ip, limit: 5, period: 1m}
//
// The request is admitted only if every applying limit admits it, and a
// denied request spends from none (see sluice.Limiter.AllowParts, and the
// Redis store for what that means on a Cluster). Rules in shadow mode are
// decided after, each alone, only when the request is admitted, and never
// deny it.
//
// # Client keys
//
// A client key is stored in the namespace of its source, so that one rule
// and client share one count through every door, and no client can pick a
// value that collides with another source's: an address (KeyIP; an IPv6
// client by its /64, WithIPv6Prefix), a header or query value, a WithKey
// function's key, a composite key of a Check, or the one global key. A
// Check for a rule keyed by ip must name an address, which is grouped by
// its prefix as requests are.
//
// A rule keyed by request (KeyRequest) is for the decision service's
// callers, who name the client themselves (an API key, a user id): a
// Check of it takes any non-empty key. It is checked by name only, never
// matched to an HTTP request, so it has no match and no group, and the
// middleware and the proxy never apply it.
//
// # Limit names
//
// Compile names every limit without a Name "<rule>-<period>" (plans:
// "<rule>-<plan>-<period>"): the IETF RateLimit policy name, and, with the
// algorithm and period, the limit's storage identity (sluice.Limit.Identity),
// so limits of different rules never share counts, and a reload that
// changes a limit's numbers keeps what each client has spent.
//
// The middleware guide is docs/middleware.md (https://github.com/sluice-go/sluice/blob/main/docs/middleware.md).
package policy
