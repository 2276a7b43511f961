// Package httplimit rate-limits net/http handlers with a sluice.Limiter.
//
// New returns the middleware: it matches each request to a rule, names the
// client, decides all the rule's limits in one atomic call, and answers
// denied requests with 429. The building blocks it uses are exported for
// servers that decide requests themselves:
//
//   - ClientIP finds the client's address behind trusted reverse proxies
//     (X-Forwarded-For or Forwarded), so that a client cannot pick its own
//     bucket by sending those headers; TrustedPeer tells whether the
//     request's peer is one of those proxies.
//   - SetHeaders writes the RateLimit-Policy and RateLimit fields of
//     draft-ietf-httpapi-ratelimit-headers-10 (RFC 9651 structured-field
//     lists, one item per limit) and the legacy X-RateLimit-Limit,
//     X-RateLimit-Remaining and X-RateLimit-Reset.
//   - WriteTooManyRequests writes the 429: Retry-After in whole seconds,
//     rounded up and never 0, and a JSON body, or an RFC 9457
//     application/problem+json body of the draft's quota-exceeded type.
//     WriteUnavailable writes the 503 of a decision the store could not
//     make, WriteError the other JSON errors, and WriteJSON any JSON body
//     with the same header fields.
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
package httplimit
