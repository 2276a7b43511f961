// Package envoy serves Envoy's rate limit service protocol
// (envoy.service.ratelimit.v3, ShouldRateLimit over gRPC) in two ways:
// Service from a sluice.Limiter, configured by files written for
// envoyproxy/ratelimit and answering as it does; and RulesService, a door
// over a policy.Engine that decides descriptors under the rules of a
// sluice policy file, sharing their counts with the other doors (see
// "Sluice rules" below).
//
//	cfg, err := envoy.LoadConfig("/srv/runtime_data/current/ratelimit/config") // a file or a directory
//	...
//	svc := envoy.NewService(limiter, cfg, envoy.WithObserver(m.Decision))
//	g := grpc.NewServer()
//	envoy.Register(g, svc)
//	...
//	svc.Update(newCfg) // hot reload: an atomic swap
//
// WithObserver takes a policy.Observer, such as metrics.Metrics.Decision,
// told of each counted descriptor under its limit's name.
//
// # Configuration
//
// A file holds one domain and its tree of descriptors, as in
// envoyproxy/ratelimit:
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number
//	        rate_limit:
//	          unit: day
//	          requests_per_unit: 5
//	  - key: to_number
//	    rate_limit:
//	      unit: day
//	      requests_per_unit: 100
//	      algorithm: sliding_window   # sluice's extension
//
// LoadConfig reads one file or a directory of them (envoyproxy/ratelimit's
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY; see ConfigFiles
// for which files), each domain defined once unless MergeDomains is given.
// The YAML is read as envoyproxy/ratelimit reads it (see ParseConfig).
// Every field envoyproxy/ratelimit reads is accepted where it reads it; any
// other field, one in the wrong place or one given twice, is an error
// naming file:line, as
// are a missing domain or key, a duplicate descriptor, an unknown unit, a
// limit that replaces itself, share_threshold on a value that is not a
// wildcard, and a limit sluice cannot enforce. The mapping:
//
//   - unit: second, minute, hour, day, week, month and year become a
//     Period of 1s, 1m, 1h, 24h, 168h, 720h (30 days) and 8760h (365
//     days), as envoyproxy/ratelimit counts them, multiplied by
//     unit_multiplier (sluice's extension) when it is above 1, up to
//     sluice.MaxPeriod.
//   - requests_per_unit becomes Limit.Limit. 0 blocks every request
//     (OVER_LIMIT, nothing counted), as in envoyproxy/ratelimit.
//   - algorithm (inside rate_limit, sluice's extension): fixed_window by
//     default, which is what envoyproxy/ratelimit enforces (windows
//     aligned to the Unix epoch), or token_bucket, gcra, sliding_window or
//     sliding_log. For token_bucket and gcra the burst is
//     requests_per_unit.
//   - Each limit is named "<domain>.<key>[_<value>].<key>[_<value>]..." for
//     its path in the tree, with every byte outside [A-Za-z0-9-_.] replaced
//     by '_' (the sluice.Limit Name rules): the label metrics see. Envoy
//     hears current_limit.name only when the rate_limit names it.
//   - A descriptor with a key and no value matches any value of that key;
//     its limit is counted per distinct value, because the store key is
//     made of the request's entries. An exact value wins over a value
//     prefix ("192.168.*", the first in file order), which wins over the
//     key alone. With share_threshold: true on a prefix, every value it
//     matches shares one count.
//   - As in envoyproxy/ratelimit, a request descriptor gets a limit only
//     from the node its last entry matches: a request shorter than the
//     path to a limit, or longer than the tree, matches nothing.
//   - unlimited: true admits without counting; the status is OK with no
//     current_limit and limit_remaining 2^32-1. A unit it does not need is
//     an error, requests_per_unit is ignored, as in envoyproxy/ratelimit.
//   - shadow_mode: true decides and counts as usual but always reports OK.
//   - quota_mode: true reports a limit exceeded without enforcing it: the
//     status is OK with current_limit and limit_remaining 0 (and no
//     duration_until_reset), and overall_code is not affected.
//     (envoyproxy/ratelimit's dynamic metadata about it is not sent.)
//   - detailed_metric and value_to_metric are accepted and ignored: this
//     package keeps no per-descriptor statistics.
//   - replaces: when a request's descriptors match a limit whose replaces
//     names another matched limit (by its rate_limit name), the named limit
//     is neither decided nor counted for that request; its status is OK.
//
// # Decisions
//
// Service decides each descriptor of a request on its own, with
// Limiter.AllowN(ctx, key, limit, cost): the store key is the domain and
// every entry of the request descriptor (a share_threshold entry's value
// replaced by its pattern), length-prefixed so that distinct descriptors
// never share a key. Descriptors with counts of their own are decided at
// once; two that share a count, in request order, the first admitted
// first, as in envoyproxy/ratelimit. The cost is the descriptor's own
// hits_addend when it is set, 0 included (a check that counts nothing),
// else the request's hits_addend, where 0 means 1; a cost above the
// limit's capacity is OVER_LIMIT without consuming anything. A descriptor
// with is_negative_hits gives its cost back (sluice.Limiter.Refund, at
// most the limit's capacity) and is answered OK with what remains;
// FailedPrecondition when the store cannot give back. A descriptor
// carrying a limit override (the "limit" field Envoy may send) is
// enforced as a fixed window with those numbers, whether or not the
// configuration has a matching node.
//
// A request for a domain the configuration does not have is answered OK,
// one OK status per descriptor, as envoyproxy/ratelimit answers it (so
// that Envoy ahead of its configuration is not refused under
// failure_mode_deny); WithUnknownDomain counts such requests, and the
// Service logs each such domain once per configuration. A descriptor that
// matches nothing (no entries, say) gets an OK status without
// current_limit. Otherwise the status carries current_limit (its name
// only when the file names the limit), limit_remaining (Result.Remaining)
// and duration_until_reset (Result.ResetAfter in whole seconds, rounded
// up: for a fixed window, the end of the current window), and is
// OVER_LIMIT when the limit denied the request and the node is in neither
// shadow nor quota mode. overall_code is OVER_LIMIT if any status is.
//
// Differences from envoyproxy/ratelimit: a denied request consumes
// nothing, where envoyproxy/ratelimit's counters also count requests over
// the limit, so a client that keeps sending over the limit is admitted
// again as soon as the window allows, and limit_remaining of a denied
// descriptor whose cost was above what remained says what remains; and
// limit overrides keep counts of their own, apart from the configured
// limit of the same descriptor, and honour its unit_multiplier. As in
// envoyproxy/ratelimit each descriptor is independent: one admitted keeps
// its count even when another of the request is over the limit. Quota responses,
// raw_body, dynamic metadata and request_headers_to_add are never set.
//
// Response headers are off by default, as in envoyproxy/ratelimit.
// WithHeaders(HeadersRateLimit) adds RateLimit-Limit, RateLimit-Remaining
// and RateLimit-Reset of the most restrictive descriptor, as
// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED does (renamed with
// WithHeaderNames); WithHeaders(HeadersIETF) adds the IETF draft's
// RateLimit-Policy and RateLimit, one distinctly named item per counted
// descriptor, in the format of package httplimit.
//
// Invalid requests — an empty domain, no descriptors or more than
// MaxDescriptors (for RulesService too), a limit override with an
// unsupported unit — fail with codes.InvalidArgument. A store failure the
// Limiter's ErrorPolicy returns as an error fails with codes.Unavailable,
// leaving the choice to Envoy's failure_mode_deny; a call that its caller
// canceled meanwhile fails with codes.Canceled instead.
//
// Protobuf strings are UTF-8: a request whose descriptor key or value is
// not (a header value of raw bytes that Envoy copied into a descriptor)
// never reaches the service. grpc-go's unmarshaling refuses it with
// codes.Internal ("string field contains invalid UTF-8"), before any
// handler or interceptor runs, so nothing is decided and Envoy's
// failure_mode_deny chooses, as for a store failure: set it to true where
// clients must not get through unlimited this way. (The HTTP doors answer
// such keys 400.)
//
// Under sluice.AllowOnError and DenyOnError a status decided while the
// store failed carries only its code: no current_limit (from which Envoy
// would write X-RateLimit headers with a remaining of 0), limit_remaining
// or duration_until_reset, and no response headers; those numbers would
// be made up. The local fallback's (LocalOnError) are real counts of this
// process's store, and reported.
//
// # Sluice rules
//
// RulesService answers from a sluice policy file (package config) instead,
// through a policy.Engine, so that a rule means the same and spends the
// same counts through Envoy as through the middleware (package httplimit),
// the proxy and the decision service (package server):
//
//	rules, err := file.Compile()
//	...
//	engine := policy.New(limiter, rules, policy.WithObserver(m.Decision))
//	envoy.Register(g, envoy.NewRulesService(engine))
//	...
//	engine.Update(newRules) // hot reload, for every door of the engine
//
// Each descriptor names its rule in an entry whose key is "rule" (Envoy's
// generic_key action with descriptor_key: rule); its one other entry is
// the client key as the rule's key source yields it from a request: the
// address for a rule keyed by ip (Envoy's remote_address action; an IPv6
// address counts as its /64, as in the middleware), the header's value for
// a rule keyed by header:<Name> (request_headers), any entry's value for a
// rule keyed by request (generic_key, request_headers: a tenant, an API
// key); a global rule needs none. A descriptor with several client entries is keyed by all of them
// ("<len>:key=<len>:value" pairs joined by ";"), a count of its own that
// no single header or query value, and no other descriptor, shares, which only a header, query or request rule can
// take. A key the rule's source could not yield
// (not an IP address for an ip rule) is InvalidArgument, as are an unknown
// rule and a descriptor without a "rule" entry.
//
//	rate_limits:
//	  - actions:
//	      - generic_key: {descriptor_key: rule, descriptor_value: per-ip}
//	      - remote_address: {}
//	  - actions:
//	      - generic_key: {descriptor_key: rule, descriptor_value: api}
//	      - request_headers: {header_name: X-API-Key, descriptor_key: api_key}
//
// Unlike Service, the descriptors of one request are one decision, as the
// rules of several groups that one request matches in the middleware: one
// call of sluice.Limiter.AllowParts, admitted only if every descriptor's
// rule admits it, and a denied request spends from none of them. Each
// status reports its rule's binding limit (current_limit names it as
// "<limit name> (<algorithm> <limit>/<period>)"); it is OVER_LIMIT for the
// rules that denied the request, OK with their unchanged state for the
// others. hits_addend is the cost of every descriptor, 0 meaning the
// rule's cost; a descriptor's own hits_addend overrides it, and an
// explicit 0 reports the state without spending. A cost above what a
// limit can ever admit makes the request OVER_LIMIT without spending
// anything. Rules in shadow mode always answer OK: they are decided after
// the others, only when those admit the request, and with a cost they
// could never admit they only report their state. A descriptor with
// is_negative_hits gives its cost back under its rule
// (policy.Engine.Refund) and is answered OK with what remains; the
// refunds of a request come before its other descriptors are decided.
//
// A rule with a concurrency limit takes a slot per descriptor that
// spends, and a descriptor with is_negative_hits frees one: Envoy sends
// the first at a request's start and, with apply_on_stream_done and
// hits_addend {number: 1, is_negative_hits: true} in the route's
// RateLimitPerRoute, the second when its stream is done. Envoy keeps no
// slot id, so the slot freed is the key's whose lease ends first; a slot
// whose end never comes frees itself when its lease (the rule's ttl)
// ends. examples/envoy/concurrency.yaml is such a route.
//
// The Envoy guide is docs/envoy.md (https://github.com/sluice-go/sluice/blob/main/docs/envoy.md).
package envoy
