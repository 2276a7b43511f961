// Package httplimit rate-limits net/http handlers with a policy.Engine.
//
// New returns the middleware, a thin door over the engine: for each
// request policy.Engine.Decide finds the rule of every group that matches
// it (rules stack by group: per address on every request, per API key
// under /api/, the strictest on login), names the client as each rule's
// key source says, and decides all their limits in one atomic call,
// admitting the request only if every rule does; the middleware writes
// the Decision back. Which proxies to believe about a client's address
// (policy.WithTrustedProxies), custom client keys (policy.WithKey), the
// metrics observer and the logger are the engine's options, not the
// middleware's; the middleware chooses only how it answers (WithHeaders,
// WithProblemJSON, WithPolicyKey, WithClock, or FromConfig for a policy
// file's http section):
//
//	file, err := config.Load("sluice.yaml")
//	...
//	rules, err := file.Compile() // the file's trusted proxies and IPv6 prefix included
//	...
//	engine := policy.New(limiter, rules, policy.WithObserver(m.Decision)) // m: a *metrics.Metrics
//	opts, err := httplimit.FromConfig(file.HTTP)
//	...
//	handler := httplimit.New(engine, opts...)(mux)
//	...
//	engine.Update(newRules) // hot reload: an atomic swap
//
// A denied request spends nothing from any of its rules. The headers list every limit of every rule that applies, rules in
// shadow mode left out, each under its own name ("<rule>-<period>"); the
// binding limit, the one that denied with the longest wait or, when the
// request is admitted, the one with the fewest remaining, drives the
// legacy X-RateLimit-* fields and Retry-After, and the 429 of
// WithProblemJSON names the limits that denied the request. The building blocks are exported for servers that
// decide requests themselves (policy.ClientIP, which finds a client's
// address behind trusted proxies, and policy.TrustedPeer are the
// engine's):
//
//   - SetHeaders writes the RateLimit-Policy and RateLimit fields of
//     draft-ietf-httpapi-ratelimit-headers-10 (RFC 9651 structured-field
//     lists, one item per limit) and the legacy X-RateLimit-Limit,
//     X-RateLimit-Remaining and X-RateLimit-Reset.
//   - WriteTooManyRequests writes the 429: Retry-After in whole seconds,
//     rounded up and never 0, and a JSON body, or an RFC 9457
//     application/problem+json body of the draft's quota-exceeded type.
//     WriteUnavailable writes the 503 of a decision the store could not
//     make.
//
// For one limit "login-1m" (5 per minute) a denied request gets:
//
//	HTTP/1.1 429 Too Many Requests
//	Ratelimit-Policy: "login-1m";q=5;w=60
//	Ratelimit: "login-1m";r=0;t=12
//	X-Ratelimit-Limit: 5
//	X-Ratelimit-Remaining: 0
//	X-Ratelimit-Reset: 1767225642
//	Retry-After: 12
//	Content-Type: application/json
//	X-Content-Type-Options: nosniff
//	Cache-Control: no-store
//
//	{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded; retry after 12 seconds","retry_after":12}}
//
// (net/http writes field names in their canonical form, Ratelimit-Policy;
// field names are case-insensitive.)
//
// The middleware guide is docs/middleware.md (https://github.com/sluice-go/sluice/blob/main/docs/middleware.md).
package httplimit
