// Package server is sluice's decision service: an HTTP JSON API that lets
// programs in any language ask whether a request fits in a rule of a
// policy file (package config), against the same counters the Go
// middleware (package httplimit) keeps. It is a door over a
// policy.Engine: each body becomes a call of the engine's Check, and the
// Decision its answer.
//
//	rules, err := file.Compile()
//	...
//	engine := policy.New(limiter, rules, policy.WithLogger(log))
//	srv := server.New(engine, server.WithReady(ping))
//
// A Server is an http.Handler. It serves:
//
//	POST /v1/check         decide one (rule, key, cost)
//	POST /v1/check/batch   decide up to 100 of them as one request, all or nothing
//	POST /v1/settle        settle a reservation at its work's cost, or give units back
//	POST /v1/settle/batch  up to 100 settles, each on its own
//	POST /v1/renew         renew the slots a reservation holds under concurrency limits
//	POST /v1/release       release them: the work is over
//	GET  /healthz          liveness: always 200 while the process serves
//	GET  /readyz           readiness: 503 while the WithReady probe fails; the store's nodes
//
// Any other path answers 404 with code NOT_FOUND. Request bodies are JSON
// (Content-Type application/json, or none), at most 64 KiB, holding one
// object and nothing after it; unknown fields are errors.
//
// # POST /v1/check
//
//	POST /v1/check
//	Content-Type: application/json
//
//	{"rule":"search","key":"abc","cost":1}
//
// rule names a rule of the policy file and key is the client key as the
// rule's key source would yield it from a request: the client's IP address
// for a rule keyed by ip (an IPv6 address counts as its /64, or the
// http section's ipv6_prefix, as in the middleware; the prefix itself,
// "2001:db8:1:2::/64", is accepted too), the header's or query parameter's
// value (an API key, a user ID) for a rule keyed by header:<Name> or
// query:<name>, any non-empty key for a rule keyed by request (the key
// the caller names: an API key, a user ID, a tenant; such a rule is for
// this service and Envoy's gRPC alone, since the middleware and the
// proxy never apply it); a rule keyed by global ignores it. cost is optional and
// defaults to the rule's cost; 0 spends nothing and counts as no decision
// in the metrics, but it answers for a request of cost 0, admitted where
// the next request of cost 1 may be denied: to see what the next request
// would get, inspect the key (sluice inspect, policy.Engine.Inspect). The
// limits are the rule's, or those of the rule's plan that matches key
// (policy.Rule.LimitsFor). The engine stores each count in the namespace
// of its key source, so that the service, the middleware, the proxy and
// Envoy's RulesService deciding with one engine (or one store) share one
// quota per rule and client: a check of rule login for 192.0.2.1 spends
// what a request from 192.0.2.1 to the login route spends.
//
// An admitted request answers 200, a denied one 429 with Retry-After:
//
//	HTTP/1.1 200 OK
//	Content-Type: application/json
//	RateLimit-Policy: "search-1m";q=10;w=60
//	RateLimit: "search-1m";r=9;t=60
//	X-RateLimit-Limit: 10
//	X-RateLimit-Remaining: 9
//	X-RateLimit-Reset: 1767225660
//
//	{"allowed":true,"limit":10,"remaining":9,"reset_after_ms":60000,"retry_after_ms":0,
//	 "policies":[{"name":"search-1m","allowed":true,"limit":10,"remaining":9,"reset_after_ms":60000,"retry_after_ms":0}]}
//
//	HTTP/1.1 429 Too Many Requests
//	Retry-After: 42
//	RateLimit-Policy: "search-1m";q=10;w=60
//	RateLimit: "search-1m";r=0;t=42
//	...
//
//	{"allowed":false,"limit":10,"remaining":0,"reset_after_ms":41500,"retry_after_ms":41500,
//	 "policies":[{"name":"search-1m","allowed":false,"limit":10,"remaining":0,"reset_after_ms":41500,"retry_after_ms":41500}]}
//
// The top-level numbers are those of the binding limit
// (sluice.MultiResult): when denied, the denying limit with the longest
// wait; when admitted, the one with the fewest remaining. policies holds
// one entry per limit, in the rule's order. Durations are in milliseconds,
// rounded up, so that a client that waits retry_after_ms is never early;
// Retry-After is in whole seconds, rounded up. The headers are the
// middleware's (httplimit.SetHeaders with httplimit.HeadersBoth).
//
// A rule in shadow mode never denies: a request it would deny answers 200
// with "allowed":true and "shadow_denied":true, the headers and numbers
// telling the real state, and no Retry-After.
//
// Under a rule that sheds by class (a policy file's priority section,
// policy.Priority), a check names its class: {"rule":"checkout",
// "key":"abc","class":"critical"}. A class the rule does not have, or
// none, is its lowest; a rule that does not shed by class ignores it. The
// answer names the class the check was decided in, and its numbers are
// that class's share of the rule's limits (8 of 10 for a class that may
// use 80%):
//
//	{"allowed":true,"limit":8,"remaining":3,"reset_after_ms":60000,"retry_after_ms":0,"class":"high","policies":[...]}
//
// A check denied as one of a class below the highest, load shed to keep
// the rest of the pool for the classes above it, also says "shed":true.
// It answers 429 with Retry-After, as every denial does, and not the
// rule's status (priority's status, 503 unless set), which is what the
// middleware and the proxy answer the clients they shed: the service
// reports to its caller, who answers its own client, and a 503 of the
// service says that the service could not decide
// (RATE_LIMITER_UNAVAILABLE), which a shed is not. A denial of the
// highest class, which may use the whole pool, is an ordinary one,
// without "shed". In a batch each result names its own class and shed.
//
// When the store fails, the Limiter's sluice.ErrorPolicy decides: the
// answer carries "degraded":true and no rate-limit headers, which describe
// the shared quota. Under the allow and deny policies, which decide
// without counting, the body carries no limit, remaining or
// reset_after_ms, at the top or in policies (those numbers would be made
// up), only allowed, the policy names and retry_after_ms (0, or the deny
// policy's wait, 1000):
//
//	{"allowed":true,"retry_after_ms":0,"degraded":true,
//	 "policies":[{"name":"search-1m","allowed":true,"retry_after_ms":0}]}
//
// The local fallback's numbers are real counts, of this process's own
// store rather than the shared one: they are reported, with
// "degraded":true. A degraded denial under the deny policy answers 503
// with code RATE_LIMITER_UNAVAILABLE and Retry-After; one made by the
// local fallback is a real 429. Under the return policy a
// store error answers 503 RATE_LIMITER_UNAVAILABLE, and the engine logs it
// (policy.WithLogger); a rule in shadow mode, which never fails a check,
// then answers 200 "allowed":true without numbers.
//
// # POST /v1/check/batch
//
//	POST /v1/check/batch
//
//	{"checks":[{"rule":"search","key":"abc"},{"rule":"export","key":"abc","cost":5},{"rule":"search","key":"xyz"}]}
//
//	HTTP/1.1 200 OK
//
//	{"results":[{"allowed":false,...},{"allowed":false,...},{"allowed":false,...}],"allowed":false}
//
// checks holds 1 to 100 checks, each as the body of /v1/check; results
// holds one result per check, in the same order and of the same shape as
// /v1/check's body, and allowed is true only if every check is allowed.
// The status is 200 whatever the outcome (a denial is in the body, not the
// status), and the response carries no rate-limit headers, which describe
// one quota. Every check is validated before any is decided: a bad check
// makes the whole batch a 400 that names it (checks[1]: ...) and consumes
// nothing. The same rule may not appear twice for one client key.
//
// The batch is one request limited by every check's rule at once, as the
// middleware decides a request that rules of several groups match: one
// call of sluice.Limiter.AllowParts, whatever the checks' keys and costs.
// Either every check consumes its cost, or none consumes anything and each
// answers "allowed":false; a check whose own limits would have admitted it
// then reports them admitting, with the batch's retry_after_ms, the wait
// until the whole batch fits. Checks of rules in shadow mode never make
// the batch fail: they are decided after the others, each on its own, and
// only when the batch is admitted (a shadow check of a denied batch
// answers "allowed":false with no numbers and no policies).
//
// Under the deny policy a degraded denial is a result with "allowed":false
// and "degraded":true, without numbers but retry_after_ms, still in a 200. A store error under the return
// policy answers 503 RATE_LIMITER_UNAVAILABLE for the whole batch.
//
// # POST /v1/settle
//
// A rule that settles (a policy file's settle section: cost decided by
// the work, an LLM call's tokens) makes /v1/check reserve: the check is
// admitted or denied at the rule's reserve (or its cost), and an admitted
// one answers a "reservation" beside the usual fields, as does a batch
// (one reservation for all its checks). When the work is done, the
// client settles it at what the work cost:
//
//	POST /v1/settle
//
//	{"reservation":"eyJpIjoi...","cost":1234}
//
//	{"allowed":true,"limit":100000,"remaining":98766,"reset_after_ms":55000,"retry_after_ms":0,
//	 "policies":[{"name":"tokens-1m","allowed":true,"limit":100000,"remaining":98766,"reset_after_ms":55000,"retry_after_ms":0}]}
//
// The difference from the reserve is given back, or charged when the work
// cost more: a debt, never denied, after which the client's requests are
// denied (the answer's allowed false, retry_after_ms until the debt is
// repaid). Rules of the reservation that do not settle keep their cost.
// The answer is the state after the settle, as a request of cost 0 sees
// it. A reservation is opaque, and holds what the store took (a
// policy.Ticket), so that any replica sharing the store settles it exactly.
// It settles once: a retried settle, on any replica, answers 409
// ALREADY_SETTLED and gives nothing back. It expires when the longest
// period of its limits has passed since its take (410
// RESERVATION_EXPIRED); one whose rules no longer settle, or whose limits
// all changed since, answers 409 RESERVATION_STALE; each keeps what it
// reserved, as a reservation never settled does. A reservation not issued
// here answers 400 INVALID_RESERVATION. A reservation is not encrypted: it
// shows the rule and the client key, which its holder knows already; nor
// signed, since a caller of this API may give units back under any rule
// anyway (a settle by rule and key).
//
// Without a reservation, a settle gives units back under a rule and key,
// as a refund whose take is not known (sluice.Limiter.Refund):
// {"rule":"search","key":"abc","cost":2}, cost defaulting to the rule's.
// POST /v1/settle/batch takes {"settles":[...]}, 1 to 100 settles, and
// answers {"results":[...]} in their order, each with its "status" and its
// answer or its "error": unlike a check batch, each settle stands alone.
//
// # POST /v1/renew and POST /v1/release
//
// A rule with a concurrency limit ({algorithm: concurrency, limit: 20,
// ttl: 30s}: at most 20 requests in flight per key) makes /v1/check
// acquire a slot: the check is denied with 429 while every slot is held,
// and an admitted one answers a "reservation", the slot's lease. Release
// it when the work ends, on any replica:
//
//	POST /v1/release
//
//	{"reservation":"eyJpIjoi..."}
//
// which answers as a settle at what the check reserved (the slot is free,
// the rule's rate limits keep their count). A slot neither renewed nor
// released is free again when its lease (ttl) ends, so that a client that
// died holds no slot for long. Work that may outlast the lease renews it
// every third of ttl or so:
//
//	POST /v1/renew
//
//	{"reservation":"eyJpIjoi..."}
//
//	{"allowed":true,...,"reservation":"eyJpIjoi..."}
//
// whose answer holds the reservation that replaces the one renewed: only
// the newest renews or releases the slot (an older one answers 409
// ALREADY_SETTLED). A renewal after the lease ended answers 410
// RESERVATION_EXPIRED when the reservation ends with the lease (a rule of
// concurrency limits alone), 409 SLOT_LOST when a longer limit keeps it
// (a rate limit's period beside the slot): either way another request may
// hold the slot now, and the work should stop. The answer reports the
// renewed slots' state alone (a renewal reads no other limit). Both
// answer 400, 409 and 410 as /v1/settle does.
//
// # Errors
//
// Errors are JSON error bodies, {"error":{"code":...,"message":...}},
// whose message says what is wrong:
//
//	400 BAD_REQUEST            malformed JSON (with the byte offset), a body that is not
//	                           valid UTF-8 (naming the field: "key", "checks[1].key";
//	                           encoding/json would replace the bytes with U+FFFD, and
//	                           distinct keys would share a count), an unknown field, a
//	                           missing rule, a key the rule's key source could not yield
//	                           (not an IP address for an ip rule, which says to write
//	                           key: request for keys the callers name; empty for a
//	                           header, query or request rule), an unknown rule (listing the known ones when
//	                           there are at most 20), a negative cost or one the rule's
//	                           limits could never admit, data after the object, a batch
//	                           of 0 or more than 100 checks or one repeating a rule for
//	                           a client key
//	405 METHOD_NOT_ALLOWED     with Allow
//	413 TOO_LARGE              a body over 64 KiB
//	415 UNSUPPORTED_MEDIA_TYPE a Content-Type other than application/json
//	503 RATE_LIMITER_UNAVAILABLE
//
// and, of a settle (each result of a settle batch holds its own):
//
//	400 INVALID_RESERVATION    a reservation /v1/check did not issue
//	409 ALREADY_SETTLED        settled already, on this replica or another
//	409 RESERVATION_STALE      none of its rules settles now with a limit it still has
//	410 RESERVATION_EXPIRED    its longest period has passed since its take
//	503 STORE_UNAVAILABLE      the store failed (no error policy answers a settle): nothing
//	                           settled, retry; or claimed, then failed: it keeps its reserve
//
// # Readiness and reload
//
// GET /healthz answers {"status":"ok"}. GET /readyz answers
// {"status":"ok","breaker":"closed"}, or 503
// {"status":"unavailable","error":"...","breaker":"..."} while the WithReady
// probe fails. A probe error that says the store still decides for some
// keys (Serving: a Redis Cluster with some masters down) answers 200
// {"status":"degraded","error":"..."}: every replica sees the same
// Cluster, so taking replicas out of the load balancer would refuse the
// keys of the masters that serve as well. Over a store of several named
// nodes (a Cluster's masters), "nodes" lists each node's breaker and
// "degraded" names the nodes that fail (found failing by the probe, or
// whose breaker is not closed):
//
//	{"status":"degraded","error":"redis store: not ready: 1 of 3 masters failing: 10.0.0.1:6379: ...",
//	 "breaker":"open","degraded":["10.0.0.1:6379"],
//	 "nodes":[{"node":"10.0.0.1:6379","breaker":"open"},{"node":"10.0.0.2:6379","breaker":"closed"}]}
//
// The engine's Update (policy.Engine.Update) swaps the rules atomically:
// a request decided under the old rules completes under them, and the
// next one sees the new rules.
//
// The decision service guide, with the OpenAPI document of its API, is docs/service.md (https://github.com/sluice-go/sluice/blob/main/docs/service.md).
package server
