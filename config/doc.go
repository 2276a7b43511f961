// Package config loads a sluice policy file: YAML that says which store
// holds the counts, what clients are told, and which limits apply to which
// requests. The middleware (package httplimit), the proxy and the decision
// service read the same file.
//
// Load and Parse check the whole file up front and report every problem at
// once, as an Errors value whose lines read
//
//	rules "search".algorithm: "token-bucket" is not one of fixed_window, sliding_window, sliding_log, token_bucket, gcra, concurrency (sluice.yaml:14)
//	rules "login": unknown field "perod" (did you mean "period"?) (sluice.yaml:19)
//
// with the field's path (a rule or plan by its name, or by its index,
// counting from 0, when it has none: rules[2]), what is wrong and what is
// accepted, and the file and line: one error per mistake. Unknown fields
// are errors, so a typo such as "perod" never falls back silently to a
// default, and the field it misspells is not reported missing too.
//
// # Format
//
//	redis:                       # optional; absent: the in-memory store
//	  url: redis://127.0.0.1:6379/0  # redis://, rediss:// or unix://; absent: in-memory (one replica only)
//	  on_error: local            # allow | deny | local (default): what to do while the store fails
//	  timeout: 100ms             # bound on every store call (default 100ms)
//	  replicas: auto             # replicas sharing the limits, whose share each enforces under local: auto (default: learned from heartbeats) or a number
//	  deny_cache: false          # answer in process the denials that must still hold (default false; exact under sluice.WithDenyCache's conditions)
//	  batch: 128                 # most concurrent decisions coalesced into one script call, >= 1 (default 128; 1: off)
//	  wait_replicas: 0           # replicas that must hold an admitted decision's write before it is answered (Redis WAIT; default 0: async);
//	                             # fewer within wait_timeout: the decision fails to on_error (standalone and Sentinel only)
//	  # wait_timeout: 50ms       # with wait_replicas >= 1 only: whole milliseconds under timeout (default half of it)
//	memory:                      # optional: the in-memory store (no url, or the on_error: local fallback)
//	  max_keys: 524288           # most entries (client key x limit) held, >= 1 (default 524288, about 60 MiB);
//	                             # when full, the least recently used is forgotten and starts afresh
//	http:                        # optional
//	  headers: both              # both (default) | ietf | legacy | none
//	  problem_json: false        # 429 body as RFC 9457 application/problem+json
//	  policy_key: false          # emit the IETF draft's pk parameter
//	  trusted_proxies: [10.0.0.0/8, 192.168.1.10]  # whose X-Forwarded-For/Forwarded hops to believe
//	  ipv6_prefix: 64            # ip keys group IPv6 clients by this prefix, 1..128 (default 64); IPv4 by address
//	rules:                       # at least one
//	  - name: search             # required, unique; letters, digits, '-', '_', '.'
//	    group: api               # the stack the rule is in (letters, digits, '-', '_', '.'); absent: the default group
//	    match: GET /api/search   # Go 1.22 ServeMux pattern; absent: the group's default rule
//	    key: header:X-API-Key    # ip (default) | global | header:<Name> | query:<name> | request
//	    missing_key: reject      # header/query keys only: reject (401, default) | deny (429) | ip
//	    algorithm: token_bucket  # fixed_window | sliding_window | sliding_log | token_bucket (default) | gcra | concurrency
//	    limit: 5                 # required: requests per period
//	    period: 1s               # required: Go duration (500ms, 1s, 1m, 1h, 1h30m)
//	    burst: 20                # token_bucket and gcra only; default = limit
//	    cost: 1                  # what one request spends (default 1)
//	    # settle: {cost_from: "header:X-Tokens-Used", reserve: 4096, strip: true}  # instead of cost: admitted at reserve
//	                             # (or postpaid: true), settled at the cost the response reports (header:<Name> | bytes); see docs/cost.md
//	    # lease: {block: 10}     # Redis only: a replica takes 10 units of a key's quota at once and answers from them in process
//	                             # (one limit, capacity >= 10 blocks); the fleet admits at most limit + replicas x block per window
//	    shadow: false            # evaluate and report, never block
//	    on_error: deny           # allow | deny | local: this rule's answer while the store fails; absent: redis.on_error
//	    plans:                   # per-key overrides, first match wins
//	      - name: pro            # required, unique in the rule
//	        keys: [key-1]        # exact client keys, and/or
//	        prefixes: [sk_pro_]  # client key prefixes
//	        limit: 50            # the plan's own limit fields, or a limits list;
//	        period: 1s           # algorithm defaults to token_bucket here too
//	        burst: 200
//	  - name: login
//	    match: POST /api/auth/login
//	    limits:                  # instead of the single-limit fields: all or nothing
//	      - {algorithm: sliding_window, limit: 5, period: 1m}
//	      - {algorithm: fixed_window, limit: 20, period: 1h}
//	  - name: exports
//	    match: POST /api/exports
//	    key: header:X-API-Key
//	    algorithm: concurrency   # requests in flight: a slot held while each runs, released when its response ends
//	    limit: 20                # required: slots; no period
//	    ttl: 30s                 # a slot's lease (default 30s), renewed while its request runs: a replica that dies frees its slots within it
//	    retry_after: 1s          # a denial's Retry-After at most (default: when the oldest lease could end, a lease away at worst)
//	  - name: pool
//	    group: shedding
//	    key: global
//	    algorithm: concurrency   # or a rate limit: a priority cuts a rule's limits for the classes below the highest
//	    limit: 1000
//	    priority:                # no plans beside it
//	      from: header:X-Priority  # header:<Name> | query:<name>: its value names the class; absent: routes only
//	      reserve: {critical: 20%, high: 10%}  # highest first: the share each class keeps for itself and those above;
//	                             # the rest (here bulk) get 70%, high 80%, critical all
//	      routes: {"GET /healthz": critical}  # ServeMux patterns whose requests get a class, ahead of from
//	      # plan: search         # or the name of the client's plan under rule search (reserve: {pro: 20%}), where from names no class
//	      default: bulk          # the lowest class (default "default"): unknown and missing classes
//	      status: 503            # a shed request's status (default 503), with code SHED
//
// A rule or plan has either the single-limit fields (algorithm, limit,
// period, burst) or a limits list, never both. Every limit is checked by
// sluice.Limit.Validate, and a rule's cost must fit in every one of its
// limits.
//
// Each limit is named for the IETF RateLimit headers and the store:
// "<rule>-<period>" ("login-1m", "login-1h"), "<rule>-<plan>-<period>" for
// a plan's limits ("search-pro-1s"), with "-2", "-3"... when a rule or plan
// has two limits of one period. The period is written without zero units
// (1m, not 1m0s). No two rules may produce the same limit name.
//
// Rules match requests by ServeMux pattern with ServeMux's precedence (the
// most specific wins) within their group; a group's rule without match
// applies to requests no other rule of the group matches. Within one
// group, two rules with the same pattern, two default rules, a pattern
// matching every request next to a default rule, and patterns that
// ServeMux finds in conflict are errors.
//
// Groups stack: a request is limited by the matching rule of every group
// at once, admitted only if each of them admits it, in one atomic call,
// and a denied request spends from none. A per-address rule on
// everything, a per-key rule on the API and a strict login rule, each in
// its own group, all apply to a login:
//
//	rules:
//	  - {name: per-ip, group: ip, limit: 100, period: 1m}
//	  - {name: per-key, group: key, match: /api/, key: header:X-API-Key, limit: 50, period: 1m}
//	  - {name: login, match: POST /api/login, limit: 5, period: 1m}
//
// A client cannot dodge the per-address rule with made-up API keys, nor
// the per-key rule from many addresses.
//
// A rule keyed by request is for the decision service (POST /v1/check)
// and Envoy's gRPC, whose callers name the client themselves: it takes
// any non-empty key they send (an API key, a user id, a tenant), where an
// ip rule takes only an address. It is checked by name, never matched to
// an HTTP request (which names no client), so it has no match and no
// group, is not its group's default rule, and the middleware and the
// proxy never apply it:
//
//	rules:
//	  - {name: per-ip, limit: 100, period: 1m}              # HTTP requests without another rule
//	  - {name: teams, key: request, limit: 10, period: 1s}  # POST /v1/check {"rule":"teams","key":"team-a"}
//
// A rule without key is keyed by ip, with or without match.
//
// An ip key is the client's address (see policy.ClientIP and
// trusted_proxies); an IPv6 client is keyed by its ipv6_prefix-bit
// prefix, since a subscriber gets a whole /64 and changes addresses in it
// at will.
//
// YAML anchors, aliases and merge keys (<<: *base) may be used; top-level
// keys that start with "x-" are ignored, to hold anchors. A file holds one
// YAML document.
//
// The policy file guide is docs/policy-file.md (https://github.com/sluice-go/sluice/blob/main/docs/policy-file.md).
package config
