package config

import (
	"errors"
	"strings"
	"testing"
)

// rule is a valid rule list, for rows about other sections.
const rule = "rules:\n  - {name: a, limit: 1, period: 1s}\n"

// shedding is a rule whose priority section, at line 5, the rows about
// it complete, from line 6.
const shedding = "rules:\n  - name: a\n    algorithm: concurrency\n    limit: 20\n    priority:\n"

// One row per class of error: the file, and the one error it must give.
var errorTests = []struct {
	name, file, want string
}{
	// The file.
	{"syntax indentation", "rules:\n  - name: a\n    limit: 1\n   period: 1s\n",
		`invalid YAML: did not find expected '-' indicator (check the indentation of this line) (sluice.yaml:4)`},
	{"syntax colon in value", "rules:\n  - name: a\n    key: header: X-API-Key\n",
		`invalid YAML: mapping values are not allowed in this context (a value that holds ": " needs quotes) (sluice.yaml:3)`},
	{"syntax unclosed flow", "rules:\n  - name: a\n    limits: [{limit: 1, period: 1s}\n  - name: b\n",
		`invalid YAML: did not find expected ',' or ']' (sluice.yaml:3)`},
	{"syntax tab", "rules:\n\t- name: a\n",
		`invalid YAML: found character that cannot start any token (indent with spaces: YAML does not allow tabs) (sluice.yaml:2)`},
	{"unknown anchor", "rules:\n  - name: a\n    limits: *base\n",
		`invalid YAML: unknown anchor 'base' referenced (sluice.yaml:3)`},
	{"empty", "",
		`rules: is missing: the file is empty, and a policy file needs at least one rule (sluice.yaml)`},
	{"comments only", "# nothing yet\n",
		`rules: is missing: the file is empty, and a policy file needs at least one rule (sluice.yaml)`},
	{"not a mapping", "- name: a\n",
		`the file must be a mapping with the keys redis, memory, http, rules, not a list (sluice.yaml:1)`},
	{"two documents", rule + "---\n" + rule,
		`a second YAML document (---) starts here; a configuration file is one document (sluice.yaml:3)`},
	{"no rules", "redis:\n  on_error: deny\n",
		`rules: is missing: a policy file needs at least one rule (sluice.yaml:1)`},
	{"rules empty", "rules: []\n",
		`rules: is empty: a policy file needs at least one rule (sluice.yaml:1)`},
	{"rules not a list", "rules:\n  name: a\n",
		`rules: must be a list of rules, not a mapping (sluice.yaml:2)`},
	{"unknown top-level field", rule + "redsi:\n  url: redis://h\n",
		`unknown field "redsi" (did you mean "redis"?) (sluice.yaml:3)`},
	{"duplicate key", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    limit: 2\n",
		`rules "a".limit: appears twice (first at line 3); keep one (sluice.yaml:5)`},

	// redis.
	{"redis url", rule + "redis:\n  url: http://user:secret@host/0\n",
		`redis.url: is not a Redis URL; write redis://[user:password@]host:port/db, rediss://... for TLS, or unix:///path/to/redis.sock (leave url out for the in-memory store) (sluice.yaml:4)`},
	{"on_error", rule + "redis:\n  on_error: fail\n",
		`redis.on_error: "fail" is not one of allow, deny, local (sluice.yaml:4)`},
	{"replicas zero", rule + "redis:\n  replicas: 0\n",
		`redis.replicas: must be auto or at least 1, got 0 (sluice.yaml:4)`},
	{"replicas word", rule + "redis:\n  replicas: many\n",
		`redis.replicas: "many" is not a whole number; auto (learned from the replicas' heartbeats in Redis), or the number of replicas sharing the limits (sluice.yaml:4)`},
	{"settle cost_from", "rules:\n  - {name: a, limit: 10, period: 1s, settle: {cost_from: X-Tokens, reserve: 5}}\n",
		`rules "a".settle.cost_from: "X-Tokens" is not a cost source; use header:<name> (a response header or trailer holding the cost) or bytes (the response body's bytes) (sluice.yaml:2)`},
	{"settle no reserve", "rules:\n  - {name: a, limit: 10, period: 1s, settle: {cost_from: bytes}}\n",
		`rules "a".settle.reserve: is missing; set reserve (what a request is admitted at: the most its work may cost) or postpaid: true (admitted while the balance holds one unit, charged after) (sluice.yaml:2)`},
	{"settle reserve and postpaid", "rules:\n  - {name: a, limit: 10, period: 1s, settle: {cost_from: bytes, reserve: 5, postpaid: true}}\n",
		`rules "a".settle.postpaid: admits a request while the balance holds one unit, so it reserves 1; leave out reserve or postpaid (sluice.yaml:2)`},
	{"settle reserve above capacity", "rules:\n  - {name: a, limit: 10, period: 1s, settle: {cost_from: bytes, reserve: 50}}\n",
		`rules "a".settle.reserve: 50 exceeds the capacity 10 of limit a-1s (token_bucket 10/1s), so no request could ever be admitted; a cost is at most the smallest limit or burst of the rule and its plans (sluice.yaml:2)`},
	{"settle and cost", "rules:\n  - {name: a, limit: 10, period: 1s, cost: 2, settle: {cost_from: bytes, reserve: 5}}\n",
		`rules "a".cost: is the reserve of a rule that settles; leave cost out and set settle.reserve, or settle.postpaid (sluice.yaml:2)`},
	{"settle strip bytes", "rules:\n  - {name: a, limit: 10, period: 1s, settle: {cost_from: bytes, reserve: 5, strip: true}}\n",
		`rules "a".settle.strip: applies to a cost read from a header; cost_from bytes has none to strip (sluice.yaml:2)`},
	{"settle misspelt", "rules:\n  - {name: a, limit: 10, period: 1s, settle: {cost_from: bytes, reserv: 5}}\n",
		`rules "a".settle: unknown field "reserv" (did you mean "reserve"?) (sluice.yaml:2)`},
	{"lease two limits", "rules:\n  - {name: a, limits: [{limit: 1000, period: 1s}, {limit: 9000, period: 1h}], lease: {block: 10}}\n",
		`rules "a".lease.block: leases a rule of one limit, and this rule (or a plan) has 2: a request under several limits is decided all or nothing in the store (sluice.yaml:2)`},
	{"lease block too large", "rules:\n  - {name: a, limit: 50, period: 1s, lease: {block: 10}}\n",
		`rules "a".lease.block: 10 is more than a tenth of the capacity 50 of limit a-1s: a block so large hands most of the limit to one replica; use a block of at most 5 (sluice.yaml:2)`},
	{"lease no block", "rules:\n  - {name: a, limit: 50, period: 1s, lease: {}}\n",
		`rules "a".lease.block: is missing; a lease takes block units of a key's quota at once, at least 1 (sluice.yaml:2)`},
	{"lease block zero", "rules:\n  - {name: a, limit: 50, period: 1s, lease: {block: 0}}\n",
		`rules "a".lease.block: must be at least 1, got 0 (sluice.yaml:2)`},
	{"rule on_error return", "rules:\n  - {name: a, limit: 1, period: 1s, on_error: return}\n",
		`rules "a".on_error: "return" is not one of allow, deny, local (sluice.yaml:2)`},
	{"timeout zero", rule + "redis:\n  timeout: 0s\n",
		`redis.timeout: must be positive, got 0s; write a Go duration such as 500ms, 1s, 1m, 1h or 1h30m (sluice.yaml:4)`},
	{"wait_replicas negative", rule + "redis:\n  wait_replicas: -1\n",
		`redis.wait_replicas: must be 0 (answer at once, the default) or a number of replicas, got -1 (sluice.yaml:4)`},
	{"wait_replicas word", rule + "redis:\n  wait_replicas: all\n",
		`redis.wait_replicas: "all" is not a whole number; how many replicas must hold a decision's write before it is answered (0: none) (sluice.yaml:4)`},
	{"wait_timeout alone", rule + "redis:\n  wait_timeout: 20ms\n",
		`redis.wait_timeout: applies only with wait_replicas of 1 or more; set wait_replicas, or leave wait_timeout out (sluice.yaml:4)`},
	{"wait_timeout at the store timeout", rule + "redis:\n  wait_replicas: 1\n  wait_timeout: 100ms\n",
		`redis.wait_timeout: 100ms is not under redis.timeout (100ms): the store timeout would cut the decision first; write less, such as 50ms (half of it) (sluice.yaml:5)`},
	{"wait_timeout over a set timeout", rule + "redis:\n  timeout: 250ms\n  wait_replicas: 1\n  wait_timeout: 1s\n",
		`redis.wait_timeout: 1s is not under redis.timeout (250ms): the store timeout would cut the decision first; write less, such as 125ms (half of it) (sluice.yaml:6)`},
	{"wait_replicas under a 1ms timeout", rule + "redis:\n  timeout: 1ms\n  wait_replicas: 1\n",
		`redis.wait_replicas: needs a redis.timeout of 2ms or more, to wait for the replicas within (wait_timeout, default half of it), got 1ms (sluice.yaml:5)`},
	{"wait_timeout not whole milliseconds", rule + "redis:\n  wait_replicas: 1\n  wait_timeout: 1500us\n",
		`redis.wait_timeout: must be a positive whole number of milliseconds (Redis's WAIT counts in milliseconds), got 1.5ms; write one such as 50ms (sluice.yaml:5)`},
	{"wait_timeout zero", rule + "redis:\n  wait_replicas: 2\n  wait_timeout: 0s\n",
		`redis.wait_timeout: must be a positive whole number of milliseconds (Redis's WAIT counts in milliseconds), got 0s; write one such as 50ms (sluice.yaml:5)`},
	{"redis unknown field", rule + "redis:\n  adress: redis://h\n",
		`redis: unknown field "adress"; redis takes url, on_error, timeout, replicas, deny_cache, batch, wait_replicas, wait_timeout (sluice.yaml:4)`},
	{"redis not a mapping", rule + "redis: redis://h\n",
		`redis: must be a mapping with the keys url, on_error, timeout, replicas, deny_cache, batch, wait_replicas, wait_timeout, not "redis://h" (sluice.yaml:3)`},

	// memory.
	{"max_keys zero", rule + "memory:\n  max_keys: 0\n",
		`memory.max_keys: must be at least 1, got 0; leave it out for the default, 524288 (sluice.yaml:4)`},
	{"max_keys negative", rule + "memory:\n  max_keys: -1\n",
		`memory.max_keys: must be at least 1, got -1; leave it out for the default, 524288 (sluice.yaml:4)`},
	{"max_keys with a unit", rule + "memory:\n  max_keys: 100MB\n",
		`memory.max_keys: "100MB" is not a whole number; the most entries (client key × limit) the in-memory store holds, at least 1 (sluice.yaml:4)`},
	{"max_keys too large", rule + "memory:\n  max_keys: 9223372036854775808\n",
		`memory.max_keys: 9223372036854775808 is out of range; the most entries (client key × limit) the in-memory store holds, at least 1 (sluice.yaml:4)`},
	{"memory unknown field", rule + "memory:\n  max_bytes: 100\n",
		`memory: unknown field "max_bytes"; memory takes max_keys (sluice.yaml:4)`},
	{"memory not a mapping", rule + "memory: 1000\n",
		`memory: must be a mapping with the keys max_keys, not 1000 (sluice.yaml:3)`},

	// http.
	{"headers", rule + "http:\n  headers: all\n",
		`http.headers: "all" is not one of both, ietf, legacy, none (sluice.yaml:4)`},
	{"bool", rule + "http:\n  problem_json: yes\n",
		`http.problem_json: "yes" is not a boolean; write true or false (sluice.yaml:4)`},
	{"trusted proxy", rule + "http:\n  trusted_proxies: [10.0.0.0/8, 10.0.0.0/33]\n",
		`http.trusted_proxies[1]: "10.0.0.0/33" is not an IP address or a CIDR prefix; write one such as 10.0.0.0/8, 192.168.1.10 or fd00::/8 (sluice.yaml:4)`},
	{"trusted proxy zone", rule + "http:\n  trusted_proxies: [\"fe80::1%eth0\"]\n",
		`http.trusted_proxies[0]: "fe80::1%eth0" is not an IP address or a CIDR prefix; write one such as 10.0.0.0/8, 192.168.1.10 or fd00::/8 (sluice.yaml:4)`},
	{"ipv6_prefix zero", rule + "http:\n  ipv6_prefix: 0\n",
		`http.ipv6_prefix: must be 1 to 128, got 0; /64 (the default) is what one subscriber gets, /56 or /48 group whole sites (sluice.yaml:4)`},
	{"ipv6_prefix too long", rule + "http:\n  ipv6_prefix: 129\n",
		`http.ipv6_prefix: must be 1 to 128, got 129; /64 (the default) is what one subscriber gets, /56 or /48 group whole sites (sluice.yaml:4)`},
	{"ipv6_prefix negative", rule + "http:\n  ipv6_prefix: -64\n",
		`http.ipv6_prefix: must be 1 to 128, got -64; /64 (the default) is what one subscriber gets, /56 or /48 group whole sites (sluice.yaml:4)`},
	{"ipv6_prefix written as a prefix", rule + "http:\n  ipv6_prefix: /64\n",
		`http.ipv6_prefix: "/64" is not a whole number; the prefix length by which ip keys group IPv6 clients, 1 to 128 (sluice.yaml:4)`},
	{"trusted proxies not a list", rule + "http:\n  trusted_proxies: 10.0.0.0/8\n",
		`http.trusted_proxies: must be a list of IP addresses and CIDR prefixes, not "10.0.0.0/8" (sluice.yaml:4)`},

	// A rule's own fields.
	{"rule not a mapping", "rules:\n  - search\n",
		`rules[0]: must be a mapping with the keys name, group, match, key, missing_key, algorithm, limit, period, ttl, retry_after, burst, limits, cost, settle, lease, shadow, on_error, plans, priority, not "search" (sluice.yaml:2)`},
	{"unknown rule field", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    perod: 1m\n",
		`rules "a": unknown field "perod" (did you mean "period"?) (sluice.yaml:5)`},
	{"missing name", "rules:\n  - limit: 1\n    period: 1s\n",
		`rules[0].name: is missing; every rule needs a name of letters, digits, '-', '_' and '.' (sluice.yaml:2)`},
	{"bad name", "rules:\n  - name: my rule\n    limit: 1\n    period: 1s\n",
		`rules[0].name: "my rule" may hold only letters, digits, '-', '_' and '.' (it names the IETF RateLimit policies) (sluice.yaml:2)`},
	{"empty name", "rules:\n  - name: ''\n    limit: 1\n    period: 1s\n",
		`rules[0].name: is empty; a name holds letters, digits, '-', '_' and '.' (sluice.yaml:2)`},
	{"name not a string", "rules:\n  - name: [a]\n    limit: 1\n    period: 1s\n",
		`rules[0].name: must be a name of letters, digits, '-', '_' and '.', not a list (sluice.yaml:2)`},
	{"duplicate rule names", "rules:\n  - {name: a, match: /a, limit: 1, period: 1s}\n  - {name: a, match: /b, limit: 1, period: 1s}\n",
		`rules "a".name: "a" is also the name of the rule at line 2; rule names are unique (sluice.yaml:3)`},
	{"key without name", "rules:\n  - {name: a, key: 'header:', limit: 1, period: 1s}\n",
		`rules "a".key: "header:" has no header name; write header:<Name>, such as header:X-API-Key (sluice.yaml:2)`},
	{"query without name", "rules:\n  - {name: a, key: 'query:', limit: 1, period: 1s}\n",
		`rules "a".key: "query:" has no parameter name; write query:<name>, such as query:api_key (sluice.yaml:2)`},
	{"key source", "rules:\n  - {name: a, key: 'cookie:sid', limit: 1, period: 1s}\n",
		`rules "a".key: "cookie:sid" is not one of ip, header:<Name>, query:<name>, global or request (sluice.yaml:2)`},
	{"header name", "rules:\n  - {name: a, key: 'header:X API Key', limit: 1, period: 1s}\n",
		"rules \"a\".key: \"X API Key\" is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only) (sluice.yaml:2)"},
	{"missing_key", "rules:\n  - {name: a, key: 'header:X-Key', missing_key: allow, limit: 1, period: 1s}\n",
		`rules "a".missing_key: "allow" is not one of reject, deny, ip (sluice.yaml:2)`},
	{"missing_key on ip", "rules:\n  - {name: a, key: ip, missing_key: deny, limit: 1, period: 1s}\n",
		`rules "a".missing_key: applies only to header and query keys, and this rule's key is ip (sluice.yaml:2)`},
	{"missing_key on request", "rules:\n  - {name: a, key: request, missing_key: ip, limit: 1, period: 1s}\n",
		`rules "a".missing_key: applies only to header and query keys, and this rule's key is request (sluice.yaml:2)`},
	{"request key with a match", "rules:\n  - {name: a, key: request, match: /api/, limit: 1, period: 1s}\n",
		`rules "a".match: a rule keyed by request takes the key its caller names (POST /v1/check, Envoy's gRPC) and is checked by name, never matched to an HTTP request; leave match out, or key the rule by ip, header:<Name>, query:<name> or global (sluice.yaml:2)`},
	{"request key with an invalid match", "rules:\n  - {name: a, key: request, match: 'GET api', limit: 1, period: 1s}\n",
		`rules "a".match: a rule keyed by request takes the key its caller names (POST /v1/check, Envoy's gRPC) and is checked by name, never matched to an HTTP request; leave match out, or key the rule by ip, header:<Name>, query:<name> or global (sluice.yaml:2)`},
	{"request key in a group", "rules:\n  - {name: a, key: request, group: svc, limit: 1, period: 1s}\n",
		`rules "a".group: a rule keyed by request takes the key its caller names (POST /v1/check, Envoy's gRPC) and is checked by name, never matched to an HTTP request, and in no group; leave group out (sluice.yaml:2)`},
	{"shadow", "rules:\n  - {name: a, shadow: 1, limit: 1, period: 1s}\n",
		`rules "a".shadow: 1 is not a boolean; write true or false (sluice.yaml:2)`},
	{"cost zero", "rules:\n  - {name: a, cost: 0, limit: 1, period: 1s}\n",
		`rules "a".cost: must be at least 1, got 0 (sluice.yaml:2)`},
	{"cost not a number", "rules:\n  - {name: a, cost: 1.5, limit: 2, period: 1s}\n",
		`rules "a".cost: 1.5 is not a whole number; cost is what one request spends, at least 1 (sluice.yaml:2)`},
	{"cost above capacity", "rules:\n  - name: a\n    cost: 6\n    limits:\n      - {limit: 1, period: 1s, burst: 10}\n      - {limit: 5, period: 1m, algorithm: fixed_window}\n",
		`rules "a".cost: 6 exceeds the capacity 5 of limit a-1m (fixed_window 5/1m0s), so no request could ever be admitted; a cost is at most the smallest limit or burst of the rule and its plans (sluice.yaml:3)`},
	{"cost above a plan's capacity", "rules:\n  - name: a\n    cost: 6\n    limit: 10\n    period: 1s\n    plans:\n      - {name: free, keys: [k], limit: 5, period: 1s}\n",
		`rules "a".cost: 6 exceeds the capacity 5 of limit a-free-1s (token_bucket 5/1s), so no request could ever be admitted; a cost is at most the smallest limit or burst of the rule and its plans (sluice.yaml:3)`},

	// match.
	{"invalid pattern", "rules:\n  - {name: a, match: 'GET api', limit: 1, period: 1s}\n",
		`rules "a".match: "GET api" is not a valid ServeMux pattern (at offset 4: host/path missing /); write [METHOD ][HOST]/PATH, such as "GET /api/search" or "/api/{id}", or leave match out for the default rule (sluice.yaml:2)`},
	{"invalid wildcard", "rules:\n  - {name: a, match: '/a/{id', limit: 1, period: 1s}\n",
		`rules "a".match: "/a/{id" is not a valid ServeMux pattern (at offset 3: bad wildcard segment (must end with '}')); write [METHOD ][HOST]/PATH, such as "GET /api/search" or "/api/{id}", or leave match out for the default rule (sluice.yaml:2)`},
	{"lower-case method", "rules:\n  - {name: a, match: 'get /x', limit: 1, period: 1s}\n",
		`rules "a".match: "get /x" could never match a request: methods are case-sensitive; did you mean "GET /x"? (sluice.yaml:2)`},
	{"host with port", "rules:\n  - {name: a, match: 'localhost:8090/', limit: 1, period: 1s}\n",
		`rules "a".match: "localhost:8090/" could never match a request: ServeMux matches the host without its port; leave the port out (sluice.yaml:2)`},
	{"upper-case host", "rules:\n  - {name: a, match: 'API.example.com/', limit: 1, period: 1s}\n",
		`rules "a".match: "API.example.com/" could never match a request: hosts are matched in lower case; did you mean "api.example.com/"? (sluice.yaml:2)`},
	{"path without its slash", "rules:\n  - {name: a, match: 'api/search', limit: 1, period: 1s}\n",
		`rules "a".match: "api/search" could never match a request: "api" reads as a host name; did you mean "/api/search"? (sluice.yaml:2)`},
	{"empty pattern", "rules:\n  - {name: a, match: '', limit: 1, period: 1s}\n",
		`rules "a".match: is empty; write [METHOD ][HOST]/PATH, such as "GET /api/search" or "/api/{id}", or leave match out for the default rule (sluice.yaml:2)`},
	{"same pattern", "rules:\n  - {name: a, match: 'GET /x', limit: 1, period: 1s}\n  - {name: b, match: \"GET \\t /x \", limit: 1, period: 1s}\n",
		`rules "b".match: "GET /x" is also the match of rule "a" (line 2); one rule per pattern (sluice.yaml:3)`},
	{"two default rules", "rules:\n  - {name: a, limit: 1, period: 1s}\n  - {name: b, limit: 1, period: 1s}\n",
		`rules "b".match: is missing here and in rule "a" (line 2): only one rule may be the default rule (the one without match) (sluice.yaml:3)`},
	{"conflicting patterns", "rules:\n  - {name: a, match: '/a/{x}', limit: 1, period: 1s}\n  - {name: b, match: '/{y}/b', limit: 1, period: 1s}\n",
		`rules "b".match: "/{y}/b" conflicts with the match "/a/{x}" of rule "a" (line 2): /{y}/b and /a/{x} both match some paths, like "/a/b". But neither is more specific than the other. /{y}/b matches "/y/b", but /a/{x} doesn't. /a/{x} matches "/a/x", but /{y}/b doesn't. (sluice.yaml:3)`},
	{"equivalent patterns", "rules:\n  - {name: a, match: 'GET /u/{id}', limit: 1, period: 1s}\n  - {name: b, match: 'GET /u/{name}', limit: 1, period: 1s}\n",
		`rules "b".match: "GET /u/{name}" conflicts with the match "GET /u/{id}" of rule "a" (line 2): GET /u/{name} matches the same requests as GET /u/{id} (sluice.yaml:3)`},
	{"catch-all and default", "rules:\n  - {name: a, limit: 1, period: 1s}\n  - {name: b, match: /, limit: 1, period: 1s}\n",
		`rules "b".match: "/" matches every request, so rule "a" (line 2), the default rule, would never apply; keep one of them (sluice.yaml:3)`},

	// group.
	{"group name", "rules:\n  - {name: a, group: 'per key', limit: 1, period: 1s}\n",
		`rules "a".group: "per key" may hold only letters, digits, '-', '_' and '.' (sluice.yaml:2)`},
	{"empty group", "rules:\n  - {name: a, group: '', limit: 1, period: 1s}\n",
		`rules "a".group: is empty; leave group out for the default group, or give it a name of letters, digits, '-', '_' and '.' (sluice.yaml:2)`},
	{"group not a string", "rules:\n  - {name: a, group: [api], limit: 1, period: 1s}\n",
		`rules "a".group: must be a group name of letters, digits, '-', '_' and '.', not a list (sluice.yaml:2)`},
	// Within a group, the checks of the default group, with the indexes
	// of the whole rules list.
	{"two default rules in a group", "rules:\n  - {name: a, limit: 1, period: 1s}\n  - {name: b, group: api, limit: 1, period: 1s}\n  - {name: c, group: api, limit: 1, period: 1s}\n",
		`rules "c".match: is missing here and in rule "b" (line 3): only one rule of group "api" may be the default rule (the one without match) (sluice.yaml:4)`},
	{"same pattern in a group", "rules:\n  - {name: a, match: /x, limit: 1, period: 1s}\n  - {name: b, group: api, match: /x, limit: 1, period: 1s}\n  - {name: c, group: api, match: /x, limit: 1, period: 1s}\n",
		`rules "c".match: "/x" is also the match of rule "b" (line 3); one rule per pattern in group "api" (sluice.yaml:4)`},
	{"conflicting patterns in a group", "rules:\n  - {name: a, match: '/{y}/b', limit: 1, period: 1s}\n  - {name: b, group: api, match: '/a/{x}', limit: 1, period: 1s}\n  - {name: c, group: api, match: '/{y}/b', limit: 1, period: 1s}\n",
		`rules "c".match: "/{y}/b" conflicts with the match "/a/{x}" of rule "b" (line 3): /{y}/b and /a/{x} both match some paths, like "/a/b". But neither is more specific than the other. /{y}/b matches "/y/b", but /a/{x} doesn't. /a/{x} matches "/a/x", but /{y}/b doesn't. (sluice.yaml:4)`},
	{"catch-all and default in a group", "rules:\n  - {name: a, match: /, limit: 1, period: 1s}\n  - {name: b, group: api, limit: 1, period: 1s}\n  - {name: c, group: api, match: '/{rest...}', limit: 1, period: 1s}\n",
		`rules "c".match: "/{rest...}" matches every request, so rule "b" (line 3), the default rule of group "api", would never apply; keep one of them (sluice.yaml:4)`},
	// A rule whose group is invalid is in no group: it clashes with no
	// default rule, only its group is reported.
	{"invalid group, no cascade", "rules:\n  - {name: a, limit: 1, period: 1s}\n  - {name: b, group: 'a b', limit: 1, period: 1s}\n",
		`rules "b".group: "a b" may hold only letters, digits, '-', '_' and '.' (sluice.yaml:3)`},

	// Limits.
	{"missing limit", "rules:\n  - name: a\n    period: 1s\n",
		`rules "a".limit: is missing; a rule needs limit and period, or a limits list (sluice.yaml:2)`},
	{"missing period", "rules:\n  - name: a\n    limit: 1\n",
		`rules "a".period: is missing; a rule needs limit and period, or a limits list (sluice.yaml:2)`},
	{"missing period in a list", "rules:\n  - name: a\n    limits:\n      - {limit: 1}\n",
		`rules "a".limits[0].period: is missing; a limit needs limit and period (sluice.yaml:4)`},
	{"algorithm", "rules:\n  - name: a\n    algorithm: token-bucket\n    limit: 1\n    period: 1s\n",
		`rules "a".algorithm: "token-bucket" is not one of fixed_window, sliding_window, sliding_log, token_bucket, gcra, concurrency (sluice.yaml:3)`},
	{"concurrency with a period", "rules:\n  - {name: a, algorithm: concurrency, limit: 5, period: 1m}\n",
		`rules "a".period: a concurrency limit has no period: it counts requests in flight; its slots' lease is ttl (default 30s) (sluice.yaml:2)`},
	{"retry_after without slots", "rules:\n  - {name: a, limit: 5, period: 1m, retry_after: 1s}\n",
		`rules "a".retry_after: is the wait a denial by a concurrency limit suggests, and the rule has none (a rate limit's Retry-After is exact) (sluice.yaml:2)`},
	{"retry_after zero", "rules:\n  - {name: a, algorithm: concurrency, limit: 5, retry_after: 0s}\n",
		`rules "a".retry_after: 0s: the wait a denial by the rule's concurrency limit suggests is above 0 (sluice.yaml:2)`},
	{"ttl of a rate limit", "rules:\n  - {name: a, limit: 5, period: 1m, ttl: 10s}\n",
		`rules "a".ttl: ttl is the lease of a concurrency limit's slots; token_bucket has a period instead (leave ttl out) (sluice.yaml:2)`},
	{"concurrency ttl too short", "rules:\n  - {name: a, algorithm: concurrency, limit: 5, ttl: 1us}\n",
		`rules "a".ttl: a slot's lease (the period) must be at least 1ms, got 1µs (sluice.yaml:2)`},
	{"concurrency too many slots", "rules:\n  - {name: a, algorithm: concurrency, limit: 20000}\n",
		`rules "a".limit: concurrency keeps one entry per slot held and allows a limit of at most 10000, got 20000 (sluice.yaml:2)`},
	{"limit not a number", "rules:\n  - {name: a, limit: five, period: 1s}\n",
		`rules "a".limit: "five" is not a whole number; limit is the number of requests per period, at least 1 (sluice.yaml:2)`},
	{"limit zero", "rules:\n  - {name: a, limit: 0, period: 1s}\n",
		`rules "a".limit: must be at least 1, got 0 (sluice.yaml:2)`},
	{"limit negative", "rules:\n  - {name: a, limit: -5, period: 1s}\n",
		`rules "a".limit: must be at least 1, got -5 (sluice.yaml:2)`},
	{"limit too large for sliding_log", "rules:\n  - {name: a, algorithm: sliding_log, limit: 20000, period: 1h}\n",
		`rules "a".limit: sliding_log keeps one entry per admitted request and allows a limit of at most 10000, got 20000; use sliding_window or token_bucket (sluice.yaml:2)`},
	{"limit too fine a rate", "rules:\n  - {name: a, limit: 400000, period: 1s}\n",
		`rules "a".limit: a token every 1s/400000 is 2.50µs, and whole microseconds (3µs) would refill more than 1% slower; use a limit that divides the period's microseconds, or sliding_window (sluice.yaml:2)`},
	{"period no unit", "rules:\n  - {name: a, limit: 1, period: 60}\n",
		`rules "a".period: 60 has no unit; write a Go duration such as 500ms, 1s, 1m, 1h or 1h30m (sluice.yaml:2)`},
	{"period invalid", "rules:\n  - {name: a, limit: 1, period: 1 min}\n",
		`rules "a".period: "1 min" is not a duration; write a Go duration such as 500ms, 1s, 1m, 1h or 1h30m (sluice.yaml:2)`},
	{"period in days", "rules:\n  - {name: a, limit: 1, period: 1d}\n",
		`rules "a".period: "1d" is not a duration; write a Go duration such as 500ms, 1s, 1m, 1h or 1h30m (a day is 24h) (sluice.yaml:2)`},
	{"period zero", "rules:\n  - {name: a, limit: 1, period: 0s}\n",
		`rules "a".period: must be at least 1ms, got 0s (sluice.yaml:2)`},
	{"period negative", "rules:\n  - {name: a, limit: 1, period: -1m}\n",
		`rules "a".period: must be at least 1ms, got -1m0s (sluice.yaml:2)`},
	{"period too long", "rules:\n  - {name: a, limit: 1, period: 100000h}\n",
		`rules "a".period: must be at most 87600h0m0s, got 100000h0m0s (sluice.yaml:2)`},
	{"burst on a window", "rules:\n  - {name: a, algorithm: sliding_window, limit: 5, period: 1m, burst: 10}\n",
		`rules "a".burst: burst applies to token_bucket and gcra only; sliding_window admits at most limit per window (leave burst out) (sluice.yaml:2)`},
	{"burst zero", "rules:\n  - {name: a, limit: 5, period: 1m, burst: 0}\n",
		`rules "a".burst: must be at least 1, got 0; leave burst out for a burst equal to limit (sluice.yaml:2)`},
	{"both forms", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    limits:\n      - {limit: 10, period: 1m}\n",
		`rules "a".limits: cannot be used with limit (line 3): a rule has either the single-limit fields (algorithm, limit, period, burst) or a limits list, not both (sluice.yaml:5)`},
	{"limits empty", "rules:\n  - name: a\n    limits: []\n",
		`rules "a".limits: is empty; list at least one limit, such as {limit: 5, period: 1s} (sluice.yaml:3)`},
	{"unknown limit field", "rules:\n  - name: a\n    limits:\n      - {limit: 1, period: 1s, name: x}\n",
		`rules "a".limits[0]: unknown field "name"; a limit takes algorithm, limit, period, ttl, burst (sluice.yaml:4)`},
	{"limit names collide", "rules:\n  - name: a\n    match: /a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: b, keys: [k], limit: 2, period: 1s}\n  - name: a-b\n    match: /b\n    limit: 3\n    period: 1s\n",
		`rules "a-b".name: gives a limit the name "a-b-1s", which a limit of rule "a" (line 2) has too (names are <rule>-[<plan>-]<period>); rename one of the rules or plans (sluice.yaml:8)`},

	// Plans.
	{"plan without keys", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: pro, limit: 10, period: 1s}\n",
		`rules "a".plans "pro": has no keys and no prefixes; list the client keys the plan applies to in keys, or their prefixes in prefixes (sluice.yaml:6)`},
	{"plan without limits", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: pro, keys: [k], period: 1s}\n",
		`rules "a".plans "pro".limit: is missing; a plan needs limit and period, or a limits list (sluice.yaml:6)`},
	{"plan name", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: 'pro plan', keys: [k], limit: 10, period: 1s}\n",
		`rules "a".plans[0].name: "pro plan" may hold only letters, digits, '-', '_' and '.' (it names the IETF RateLimit policies) (sluice.yaml:6)`},
	{"duplicate plan names", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: pro, keys: [k1], limit: 10, period: 1s}\n      - {name: pro, keys: [k2], limit: 20, period: 1s}\n",
		`rules "a".plans "pro".name: "pro" is also the name of the plan at line 6; plan names are unique within a rule (sluice.yaml:7)`},
	{"key in two plans", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: pro, keys: [k1], limit: 10, period: 1s}\n      - {name: max, keys: [k2, k1], limit: 20, period: 1s}\n",
		`rules "a".plans "max".keys[1]: "k1" is also a key of plan "pro", and the first matching plan wins (sluice.yaml:7)`},
	{"key behind a prefix", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: pro, prefixes: [sk_], limit: 10, period: 1s}\n      - {name: max, keys: [sk_1], limit: 20, period: 1s}\n",
		`rules "a".plans "max".keys[0]: "sk_1" matches a prefix of plan "pro", and the first matching plan wins (sluice.yaml:7)`},
	{"prefix behind a prefix", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: pro, prefixes: [sk_], limit: 10, period: 1s}\n      - {name: max, prefixes: [sk_max_], limit: 20, period: 1s}\n",
		`rules "a".plans "max".prefixes[0]: every key with prefix "sk_max_" matches a prefix of plan "pro", and the first matching plan wins (sluice.yaml:7)`},
	{"empty key", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: pro, keys: [k, ''], limit: 10, period: 1s}\n",
		`rules "a".plans "pro".keys[1]: is empty; a plan lists client keys (sluice.yaml:6)`},
	{"unknown plan field", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: pro, keys: [k], limit: 10, period: 1s, tier: gold}\n",
		`rules "a".plans "pro": unknown field "tier"; a plan takes name, keys, prefixes, algorithm, limit, period, ttl, burst, limits (sluice.yaml:6)`},

	// priority: each mistake on the field it is about, none left for the
	// engine to report against the whole file.
	{"priority not a mapping", shedding[:len(shedding)-1] + " [critical]\n",
		`rules "a".priority: must be a mapping with the keys from, reserve, routes, plan, default, status, not a list (sluice.yaml:5)`},
	{"plan names no rule", shedding + "      reserve: {pro: 20%}\n      plan: api\n",
		`rules "a".priority.plan: "api" is no rule of the file; plan names the rule whose plans give a client's class (sluice.yaml:7)`},
	{"plan of a rule without plans", shedding + "      reserve: {pro: 20%}\n      plan: b\n  - {name: b, match: /b, key: \"header:X-Api-Key\", limit: 1, period: 1s}\n",
		`rules "a".priority.plan: rule "b" has no plans to give a class (sluice.yaml:7)`},
	{"plan of a rule keyed by request", shedding + "      reserve: {pro: 20%}\n      plan: b\n  - {name: b, key: request, limit: 1, period: 1s, plans: [{name: pro, keys: [k], limit: 2, period: 1s}]}\n",
		`rules "a".priority.plan: rule "b" is keyed by request: a request has no key for it (sluice.yaml:7)`},
	{"plan not a name", shedding + "      reserve: {pro: 20%}\n      plan: \"a b\"\n",
		`rules "a".priority.plan: "a b" may hold only letters, digits, '-', '_' and '.' (it names the IETF RateLimit policies) (sluice.yaml:7)`},
	{"cost above the lowest class's share", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 10\n    period: 1h\n    cost: 8\n    priority: {reserve: {critical: 30%}}\n",
		`rules "a".cost: 8 is more than the lowest class, "default", may use of limit a-1h (7 of 10): its requests could never be admitted; lower the cost or the reserves (sluice.yaml:6)`},
	{"priority misspelt field", shedding + "      resrve: {critical: 20%}\n",
		`rules "a".priority: unknown field "resrve" (did you mean "reserve"?) (sluice.yaml:6)`},
	{"reserve missing", shedding + "      from: header:X-Priority\n",
		`rules "a".priority.reserve: is missing; name the classes above the lowest, highest first, each with the share of capacity it keeps, such as {critical: 20%, high: 10%} (sluice.yaml:6)`},
	{"reserve empty", shedding + "      reserve: {}\n",
		`rules "a".priority.reserve: is empty; name the classes above the lowest, highest first, each with the share of capacity it keeps, such as {critical: 20%, high: 10%} (sluice.yaml:6)`},
	{"reserve a list", shedding + "      reserve: [critical]\n",
		`rules "a".priority.reserve: must be a mapping of classes to shares, highest first, such as {critical: 20%, high: 10%}, not a list (sluice.yaml:6)`},
	{"reserve a number", shedding + "      reserve:\n        critical: 20\n",
		`rules "a".priority.reserve.critical: "20" is not a percentage above 0% and below 100%, such as 20% or 12.5% (sluice.yaml:7)`},
	{"reserve a fraction", shedding + "      reserve: {critical: 0.2}\n",
		`rules "a".priority.reserve.critical: "0.2" is not a percentage above 0% and below 100%, such as 20% or 12.5% (sluice.yaml:6)`},
	{"reserve all", shedding + "      reserve: {critical: 100%}\n",
		`rules "a".priority.reserve.critical: "100%" is not a percentage above 0% and below 100%, such as 20% or 12.5% (sluice.yaml:6)`},
	{"reserve nothing", shedding + "      reserve: {critical: 0%}\n",
		`rules "a".priority.reserve.critical: "0%" is not a percentage above 0% and below 100%, such as 20% or 12.5% (sluice.yaml:6)`},
	{"reserve not a scalar", shedding + "      reserve: {critical: [20%]}\n",
		`rules "a".priority.reserve.critical: must be a percentage such as 20%, not a list (sluice.yaml:6)`},
	{"shares add up to 100%", shedding + "      reserve:\n        critical: 60%\n        high: 40%\n",
		`rules "a".priority.reserve: the shares add up to 100%, which leaves the lowest class, "default", nothing; they must add up to less than 100% (sluice.yaml:6)`},
	{"shares add up to more", shedding + "      reserve: {critical: 70%, high: 45.5%}\n      default: bulk\n",
		`rules "a".priority.reserve: the shares add up to 115.5%, which leaves the lowest class, "bulk", nothing; they must add up to less than 100% (sluice.yaml:6)`},
	{"class named twice", shedding + "      reserve:\n        critical: 20%\n        critical: 10%\n",
		`rules "a".priority.reserve.critical: appears twice (first at line 7); keep one (sluice.yaml:8)`},
	{"class name", shedding + "      reserve: {'very high': 20%}\n",
		`rules "a".priority.reserve: "very high" is not a class name; a name holds letters, digits, '-', '_' and '.' (sluice.yaml:6)`},
	{"lowest class reserves", shedding + "      reserve:\n        critical: 20%\n        default: 10%\n",
		`rules "a".priority.reserve.default: is the lowest class ("default", unless default names another), which reserves nothing: reserve lists the classes above it (sluice.yaml:8)`},
	{"default reserves", shedding + "      reserve: {critical: 20%}\n      default: critical\n",
		`rules "a".priority.reserve.critical: is the lowest class ("critical", as default names it), which reserves nothing: reserve lists the classes above it (sluice.yaml:6)`},
	{"default name", shedding + "      reserve: {critical: 20%}\n      default: best effort\n",
		`rules "a".priority.default: "best effort" is not a class name; a name holds letters, digits, '-', '_' and '.' (sluice.yaml:7)`},
	{"from a cookie", shedding + "      from: cookie:prio\n      reserve: {critical: 20%}\n",
		`rules "a".priority.from: "cookie:prio" is not one of ip, header:<Name>, query:<name>, global or request (sluice.yaml:6)`},
	{"from the address", shedding + "      from: ip\n      reserve: {critical: 20%}\n",
		`rules "a".priority.from: "ip": a class comes from a header or a query parameter (header:<Name> or query:<name>) (sluice.yaml:6)`},
	{"route to an unknown class", shedding + "      reserve: {critical: 20%}\n      routes:\n        \"POST /checkout\": urgent\n",
		`rules "a".priority.routes "POST /checkout": class "urgent" is not one of critical, default (sluice.yaml:8)`},
	{"route to a class not a scalar", shedding + "      reserve: {critical: 20%}\n      routes: {/x: [critical]}\n",
		`rules "a".priority.routes "/x": must be a class: one of critical, default, not a list (sluice.yaml:7)`},
	{"route pattern", shedding + "      reserve: {critical: 20%}\n      routes: {'GET api': critical}\n",
		`rules "a".priority.routes "GET api": "GET api" is not a valid ServeMux pattern (at offset 4: host/path missing /); write [METHOD ][HOST]/PATH, such as "POST /api/checkout" or "/api/{id}" (sluice.yaml:7)`},
	{"route that never matches", shedding + "      reserve: {critical: 20%}\n      routes: {'post /x': critical}\n",
		`rules "a".priority.routes "post /x": "post /x" could never match a request: methods are case-sensitive; did you mean "POST /x"? (sluice.yaml:7)`},
	{"route twice", shedding + "      reserve: {critical: 20%}\n      routes:\n        GET /x: critical\n        \"GET  /x\": default\n",
		`rules "a".priority.routes "GET  /x": "GET /x" is also the route at line 8; keep one (sluice.yaml:9)`},
	{"routes in conflict", shedding + "      reserve: {critical: 20%}\n      routes:\n        /a/{x}: critical\n        /{y}/b: default\n",
		`rules "a".priority.routes "/{y}/b": "/{y}/b" conflicts with the route "/a/{x}" (line 8): /{y}/b and /a/{x} both match some paths, like "/a/b". But neither is more specific than the other. /{y}/b matches "/y/b", but /a/{x} doesn't. /a/{x} matches "/a/x", but /{y}/b doesn't. (sluice.yaml:9)`},
	{"routes a list", shedding + "      reserve: {critical: 20%}\n      routes: [/x]\n",
		`rules "a".priority.routes: must be a mapping of route patterns to classes, such as {"POST /api/checkout": critical}, not a list (sluice.yaml:7)`},
	{"routes of a rule keyed by request", "rules:\n  - name: a\n    key: request\n    limit: 20\n    period: 1s\n    priority:\n      reserve: {critical: 20%}\n      routes: {/x: critical}\n",
		`rules "a".priority.routes: a rule keyed by request takes the key its caller names (POST /v1/check, Envoy's gRPC) and is checked by name, never matched to an HTTP request; leave routes out, and let each check name its class (sluice.yaml:8)`},
	{"priority with plans", "rules:\n  - name: a\n    limit: 20\n    period: 1s\n    plans:\n      - {name: pro, keys: [k], limit: 50, period: 1s}\n    priority:\n      reserve: {critical: 20%}\n",
		`rules "a".priority: a rule that sheds by class has no plans: its classes share the rule's limits, where a plan gives some clients limits of their own; leave out plans or priority (sluice.yaml:7)`},
	{"status not an error", shedding + "      reserve: {critical: 20%}\n      status: 200\n",
		`rules "a".priority.status: 200 is no error status; status is the HTTP status of a request shed, 400 to 599 (503 unless set) (sluice.yaml:7)`},
	{"status beyond 599", shedding + "      reserve: {critical: 20%}\n      status: 600\n",
		`rules "a".priority.status: 600 is no error status; status is the HTTP status of a request shed, 400 to 599 (503 unless set) (sluice.yaml:7)`},
	{"status a word", shedding + "      reserve: {critical: 20%}\n      status: unavailable\n",
		`rules "a".priority.status: "unavailable" is not a whole number; status is the HTTP status of a request shed, 400 to 599 (503 unless set) (sluice.yaml:7)`},
}

func TestErrors(t *testing.T) {
	for _, tt := range errorTests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("sluice.yaml", []byte(tt.file))
			if err == nil {
				t.Fatalf("no error; parsed %+v", f)
			}
			if f != nil {
				t.Errorf("got a File with an error")
			}
			checkErrs(t, err, tt.want)
		})
	}
}

// One mistake, one error: a misspelt field is reported as unknown, with
// the field it misspells, and that field is not reported missing too (nor
// is a misspelt match a second default rule); a typo never falls back to
// a default silently. A rule is named by its name, or by its index when
// the typo is in its name.
var typoTests = []struct {
	name, file string
	want       []string
}{
	{"required field", "rules:\n  - name: api\n    limt: 5\n    period: 1s\n",
		[]string{`rules "api": unknown field "limt" (did you mean "limit"?) (sluice.yaml:3)`}},
	{"the other required field", "rules:\n  - name: a\n    limit: 1\n    perod: 1s\n",
		[]string{`rules "a": unknown field "perod" (did you mean "period"?) (sluice.yaml:4)`}},
	{"optional field", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    bursts: 5\n",
		[]string{`rules "a": unknown field "bursts" (did you mean "burst"?) (sluice.yaml:5)`}},
	{"name", "rules:\n  - nme: api\n    limit: 1\n    period: 1s\n",
		[]string{`rules[0]: unknown field "nme" (did you mean "name"?) (sluice.yaml:2)`}},
	{"limits list", "rules:\n  - name: login\n    lmits:\n      - {limit: 5, period: 1m}\n",
		[]string{`rules "login": unknown field "lmits" (did you mean "limits"?) (sluice.yaml:3)`}},
	{"match beside a default rule", "rules:\n  - {name: a, limit: 1, period: 1s}\n  - {name: b, mtch: /b, limit: 1, period: 1s}\n",
		[]string{`rules "b": unknown field "mtch" (did you mean "match"?) (sluice.yaml:3)`}},
	{"in a limits list", "rules:\n  - name: login\n    limits:\n      - {limit: 5, perid: 1m}\n",
		[]string{`rules "login".limits[0]: unknown field "perid" (did you mean "period"?) (sluice.yaml:4)`}},
	{"plan name", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {nam: pro, keys: [k], limit: 2, period: 1s}\n",
		[]string{`rules "a".plans[0]: unknown field "nam" (did you mean "name"?) (sluice.yaml:6)`}},
	{"plan field", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    plans:\n      - {name: pro, keys: [k], limit: 2, priod: 1s}\n",
		[]string{`rules "a".plans "pro": unknown field "priod" (did you mean "period"?) (sluice.yaml:6)`}},
	{"rules", "rulse:\n  - {name: a, limit: 1, period: 1s}\n",
		[]string{`unknown field "rulse" (did you mean "rules"?) (sluice.yaml:1)`}},
	// Two mistakes, two errors: a typo whose suggestion is not the
	// missing field leaves that field reported.
	{"typo and a missing field", "rules:\n  - name: a\n    limit: 1\n    algoritm: gcra\n",
		[]string{
			`rules "a".period: is missing; a rule needs limit and period, or a limits list (sluice.yaml:2)`,
			`rules "a": unknown field "algoritm" (did you mean "algorithm"?) (sluice.yaml:4)`,
		}},
	{"no suggestion", "rules:\n  - name: a\n    limit: 1\n    period: 1s\n    tier: gold\n",
		[]string{`rules "a": unknown field "tier"; a rule takes name, group, match, key, missing_key, algorithm, limit, period, ttl, retry_after, burst, limits, cost, settle, lease, shadow, on_error, plans, priority (sluice.yaml:5)`}},
}

func TestTypos(t *testing.T) {
	for _, tt := range typoTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("sluice.yaml", []byte(tt.file))
			checkErrs(t, err, tt.want...)
		})
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	const file = `redis:
  on_error: explode
  timeout: -1s
http:
  headers: all
  trusted_proxies: [10.0.0.300]
rules:
  - name: search
    match: GET /api/search
    algorithm: token-bucket
    limit: 0
    perod: 1s
  - name: search
    match: "GET  /api/search"
    key: cookie:sid
    algorithm: fixed_window
    limit: 5
    period: 1m
    burst: 10
    cost: 0
  - name: login
    limits:
      - {limit: -1, period: 0s}
      - {algorithm: sliding_log, limit: 5, period: 5}
  - limit: 3
    period: 1s
`
	_, err := Parse("bad.yaml", []byte(file))
	checkErrs(t, err,
		`redis.on_error: "explode" is not one of allow, deny, local (bad.yaml:2)`,
		`redis.timeout: must be positive, got -1s; write a Go duration such as 500ms, 1s, 1m, 1h or 1h30m (bad.yaml:3)`,
		`http.headers: "all" is not one of both, ietf, legacy, none (bad.yaml:5)`,
		`http.trusted_proxies[0]: "10.0.0.300" is not an IP address or a CIDR prefix; write one such as 10.0.0.0/8, 192.168.1.10 or fd00::/8 (bad.yaml:6)`,
		`rules "search".algorithm: "token-bucket" is not one of fixed_window, sliding_window, sliding_log, token_bucket, gcra, concurrency (bad.yaml:10)`,
		`rules "search".limit: must be at least 1, got 0 (bad.yaml:11)`,
		`rules "search": unknown field "perod" (did you mean "period"?) (bad.yaml:12)`,
		`rules "search".name: "search" is also the name of the rule at line 8; rule names are unique (bad.yaml:13)`,
		`rules "search".match: "GET /api/search" is also the match of rule "search" (line 8); one rule per pattern (bad.yaml:14)`,
		`rules "search".key: "cookie:sid" is not one of ip, header:<Name>, query:<name>, global or request (bad.yaml:15)`,
		`rules "search".burst: burst applies to token_bucket and gcra only; fixed_window admits at most limit per window (leave burst out) (bad.yaml:19)`,
		`rules "search".cost: must be at least 1, got 0 (bad.yaml:20)`,
		`rules "login".limits[0].limit: must be at least 1, got -1 (bad.yaml:23)`,
		`rules "login".limits[0].period: must be at least 1ms, got 0s (bad.yaml:23)`,
		`rules "login".limits[1].period: 5 has no unit; write a Go duration such as 500ms, 1s, 1m, 1h or 1h30m (bad.yaml:24)`,
		`rules[3].name: is missing; every rule needs a name of letters, digits, '-', '_' and '.' (bad.yaml:25)`,
		`rules[3].match: is missing here and in rule "login" (line 21): only one rule may be the default rule (the one without match) (bad.yaml:25)`,
	)
}

// Aliases cannot make a small file expand into an enormous walk: here
// 1000 rules of 1000 limits each from about 8 KB.
func TestAliasBomb(t *testing.T) {
	thousand := func(alias string) string {
		return "[" + strings.Repeat(alias+", ", 999) + alias + "]"
	}
	file := "x-i: &i {limit: 1, period: 1s}\n" +
		"x-l: &l " + thousand("*i") + "\n" +
		"x-r: &r {name: a, limits: *l}\n" +
		"rules: " + thousand("*r") + "\n"
	_, err := Parse("bomb.yaml", []byte(file))
	var errs Errors
	if !errors.As(err, &errs) || !strings.Contains(errs[0].Error(), "aliases expand the file too much") {
		t.Fatalf("err = %.300v", err)
	}
	// A merge that includes itself stops too.
	_, err = Parse("loop.yaml", []byte("rules:\n  - &r {name: a, limit: 1, period: 1s, <<: *r}\n"))
	checkErrs(t, err, `rules "a".<<: merges a mapping that includes it (loop.yaml:2)`)
}

// A rule or plan whose name is missing or invalid keeps its limits
// unnamed: messages about its other fields never show a made-up name such
// as "-1s" or "a--1s".
func TestNoNameInventedForUnnamed(t *testing.T) {
	const file = `rules:
  - {name: 'a b', match: /x, cost: 6, limit: 5, period: 1s}
  - name: c
    cost: 6
    limit: 10
    period: 1s
    plans:
      - {name: 'p q', keys: [k], limit: 5, period: 1s}
      - {keys: [j], limit: 5, period: 1s}
`
	_, err := Parse("sluice.yaml", []byte(file))
	checkErrs(t, err,
		`rules[0].name: "a b" may hold only letters, digits, '-', '_' and '.' (it names the IETF RateLimit policies) (sluice.yaml:2)`,
		`rules[0].cost: 6 exceeds the capacity 5 of the limit token_bucket 5/1s, so no request could ever be admitted; a cost is at most the smallest limit or burst of the rule and its plans (sluice.yaml:2)`,
		`rules "c".cost: 6 exceeds the capacity 5 of the limit token_bucket 5/1s, so no request could ever be admitted; a cost is at most the smallest limit or burst of the rule and its plans (sluice.yaml:4)`,
		`rules "c".plans[0].name: "p q" may hold only letters, digits, '-', '_' and '.' (it names the IETF RateLimit policies) (sluice.yaml:8)`,
		`rules "c".plans[1].name: is missing; every plan needs a name of letters, digits, '-', '_' and '.' (sluice.yaml:9)`,
	)
}
