// Package admin is the operator door of sluice serve: a live dashboard
// at GET /, and the JSON it reads, for people and for sluice top; and the
// operator API of sluice inspect (read-only) and sluice reset (with a
// bearer token, off without one).
//
//	top := admin.NewTop(0) // the most limited keys, DefaultTopK counters
//	h := admin.New(admin.WithEngine(p.Engine), admin.WithMetrics(m), admin.WithTop(top))
//	go h.Run(ctx)          // samples the metrics once a second
//	h.Register(mux)        // GET / and /admin/..., or serve h on a listener of its own
//
// with top.Observe and m.Decision both told of every decision (see
// policy.Observer), and h.Reloaded of every reload
// (policyfile.WithReloadReport).
//
// # Endpoints
//
//	GET /                  the dashboard page (HTML; script and style under /admin/ui/)
//	GET /admin/ui/...      the page's app.js, style.css and favicon.svg
//	GET /admin/v1/stats    what the page shows, as JSON (Stats); ?window=N seconds of history (default 300), ?n=N keys (default 20)
//	GET /admin/v1/top      the most limited keys, as JSON (TopKeys); ?n=N (default 20, at most the Top's k)
//	GET /admin/v1/inspect  a client's state under a rule, spending nothing (Inspection); ?rule=R&key=K[&cost=N]
//	POST /admin/v1/reset   forget a client's state under a rule: {"rule":"R","key":"K"} (ResetRequest), with
//	                       Authorization: Bearer <SLUICE_ADMIN_TOKEN>; 403 while off (WithToken), 401 without the token
//
// Under AuthAll, stats, top and inspect need the bearer token too (see
// Security).
//
// Any other path of a Handler serving a listener of its own is a JSON
// 404; a bad parameter is a JSON 400 naming it. The page loads nothing
// but its own files (its Content-Security-Policy says so), polls
// /admin/v1/stats every second, and works in current Chromium and
// Firefox without a framework or a build step.
//
// # GET /admin/v1/stats
//
// The field names are stable; durations are in seconds, times RFC 3339.
//
//	{
//	  "now": "2026-12-01T19:00:00Z", "uptime_seconds": 360.5,
//	  "config": {"path": "sluice.yaml", "kind": "policy", "summary": "2 rules"},
//	  "rules": [{"name": "login", "match": "POST /login", "key": "ip", "cost": 1, "shadow": false,
//	             "limits": [{"name": "login-1m", "algorithm": "sliding_window", "limit": 5,
//	                         "period": "1m", "period_seconds": 60}]},
//	            {"name": "jobs", "match": "", "key": "global", "cost": 1, "shadow": false,
//	             "limits": [{"name": "jobs-concurrent", "algorithm": "concurrency", "limit": 10,
//	                         "period": "30s", "period_seconds": 30}],
//	             "classes": ["critical", "default"]}],
//	  "series": {"start": "...", "step_seconds": 1, "steps": 300,
//	             "rules": [{"rule": "login",
//	                        "per_second": {"allowed": [0.5, ...], "denied": [...]},
//	                        "window": {"allowed": 150, "denied": 12},
//	                        "total": {"allowed": 180, "denied": 12}},
//	                       {"rule": "jobs", ..., "shed": {"default": 3}}],
//	             "store_errors": [...], "degraded": [...], "takes": [...]},
//	  "slots": [{"rule": "jobs", "limit": "jobs-concurrent", "slots": 10, "in_use": 7}],
//	  "store": {"breaker": "closed",
//	            "nodes": [{"node": "10.0.0.1:6379", "breaker": "closed"}, ...],
//	            "latency": {"p50_seconds": 0.00021, "p90_seconds": 0.0004, "p99_seconds": 0.0009,
//	                        "calls": 5400, "window_seconds": 60},
//	            "errors_per_second": 0, "degraded_per_second": 0},
//	  "top": {...as GET /admin/v1/top...},
//	  "reloads": [{"time": "...", "outcome": "rejected", "error": "sluice.yaml:3: ..."}]
//	}
//
// series holds, per rule with decisions, the decisions per second of
// each outcome it has had (allowed, denied, denied_by_other,
// shadow_denied, degraded_allowed, degraded_denied), oldest first, one
// value per step of about a second, computed from sluice_decisions_total
// sampled once a second: the numbers Prometheus scrapes, not a second
// count. window sums each outcome over the series, total since the start.
// store_errors is sluice_store_errors_total per second, degraded
// sluice_fallbacks_total per second (the decisions the error policy made
// while the store failed), takes the store calls per second. The latency
// percentiles are those of sluice_store_duration_seconds{op="take"} over
// the last minute, interpolated within its buckets as Prometheus'
// histogram_quantile does (null without calls). breaker is the store's
// circuit breakers' state, the worst node's: closed, open or half_open;
// nodes, over a store of several named nodes (a Redis Cluster's masters),
// each node's breaker, by node. reloads are the last 20, newest first.
//
// A rule that sheds by class (priority) lists its classes, highest
// first, and its series the requests it shed since the start by class
// (sluice_shed_total: this replica's decisions, like every figure of
// series). slots lists each concurrency limit of the rules: for a rule
// keyed global, in_use is how many of its slots are held now, read from
// the store at each GET (a look that spends nothing, under op="peek") and
// so the whole fleet's, held through any replica or by any client of
// /v1/check; for a rule keyed by client, per_key is true and in_use null,
// its slots being each key's (sluice inspect reads one key's), and so is
// in_use, with error, when the store could not be read.
// sluice_slots_held, which counts the slots a process's middleware and
// proxy hold, is none of these: a sluice serve holds none itself.
//
// # GET /admin/v1/top
//
//	{"since": "...", "until": "...", "span_seconds": 421.3, "masked": true,
//	 "counters": 1000, "tracked": 2, "counted": 57,
//	 "keys": [{"rule": "login", "key": "#3f2a9c0d11e7", "denied": 52, "error": 0, "shadow": false}]}
//
// keys are the most limited (rule, client key) pairs of the span (see
// Top): denied is how many decisions the rule denied the key (for a rule
// in shadow mode, shadow true, would have denied), an upper bound whose
// overestimate is at most error. Keys are masked with policy.MaskKey
// ("#" and 12 hex digits of the key's SHA-256) unless the Handler shows
// them in the clear (WithPlainKeys, sluice serve --show-keys).
//
// Inspect and reset take such a masked key as they take a key in the
// clear: the Handler finds the key it masks among those its Top tracks
// (Top.Unmask), and answers naming the key as given. A mask is not
// reversible, so a key the Top does not track (not limited in its span)
// must be given in the clear, and so must a key longer than MaxKeyBytes;
// a mask that no tracked key, or several, mask to is a 400 saying so.
//
// # Security
//
// sluice serve serves the Handler on its main listener (loopback by
// default) or on a listener of its own, and guards it three ways:
//
//   - Host: a request whose Host is not localhost, an IP address, or one
//     of the names of WithHosts (sluice serve --admin-hosts) is refused
//     with 421 HOST_NOT_ALLOWED, and a POST whose Origin is neither the
//     Host it was sent to nor one of those names with 403
//     ORIGIN_NOT_ALLOWED: a web page cannot reach the dashboard on a
//     loopback listener through DNS rebinding, nor reset from another
//     site. See Hosts.
//   - Token: a reset needs the bearer token (WithToken; sluice serve's
//     SLUICE_ADMIN_TOKEN), compared in constant time and never written in
//     an answer: 403 while there is none, 401 without it. Under AuthAll
//     (WithAuth; --admin-auth all) so do stats, top and inspect; the page
//     then asks for the token, keeps it in the tab's sessionStorage and
//     sends it as its polls' bearer token.
//   - Guesses: a wrong token counts against its address (FailuresPerAddress
//     per FailurePeriod, an IPv6 address by its /64) and against all
//     (FailuresTotal), in a sluice.Limiter over a memory store; past
//     either, every request that needs the token is answered 429
//     RATE_LIMITED with Retry-After, the right token too. Each refusal is
//     logged at Warn, the address masked as a client key (policy.MaskKey)
//     unless keys are shown in the clear.
//
// Without AuthAll, the endpoints but reset are read-only and served
// without the token: they show anyone who can reach the listener the rule
// names, their limits and traffic, the most limited keys (masked unless
// --show-keys), and any key's state under a rule (inspect). Keep them on
// loopback, behind an authenticating proxy, or behind the token.
//
// The operating guide is docs/operating.md (https://github.com/sluice-go/sluice/blob/main/docs/operating.md).
package admin
