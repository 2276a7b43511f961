package httplimit

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/policy"
)

// Option configures the middleware's responses.
type Option func(*options)

type options struct {
	headers   HeaderMode
	problem   bool
	policyKey bool
	now       func() time.Time
}

// WithHeaders chooses which rate-limit headers responses carry (default
// HeadersBoth: the IETF draft's and the legacy X-RateLimit-*).
func WithHeaders(m HeaderMode) Option { return func(o *options) { o.headers = m } }

// WithProblemJSON makes 429 bodies RFC 9457 application/problem+json of the
// draft's quota-exceeded type instead of the default JSON body.
func WithProblemJSON() Option { return func(o *options) { o.problem = true } }

// WithPolicyKey adds the draft's pk parameter (a hash of the client key)
// to the IETF headers.
func WithPolicyKey() Option { return func(o *options) { o.policyKey = true } }

// WithClock sets the clock used for the epoch seconds of X-RateLimit-Reset
// (default time.Now).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// FromConfig returns the options that the http section of a policy file
// sets. (Its trusted proxies and IPv6 prefix are the rules' key settings:
// config.File.Compile applies them.)
func FromConfig(h config.HTTP) ([]Option, error) {
	mode, err := ParseHeaderMode(h.Headers)
	if err != nil {
		return nil, err
	}
	opts := []Option{WithHeaders(mode)}
	if h.ProblemJSON {
		opts = append(opts, WithProblemJSON())
	}
	if h.PolicyKey {
		opts = append(opts, WithPolicyKey())
	}
	return opts, nil
}

// New returns middleware that limits requests by the rules of e.
//
// Each request is decided by e.Decide: in every group of rules the most
// specific rule whose ServeMux pattern matches it applies, and the request
// passes only if every rule that applies admits it; a request no rule
// matches passes unlimited. Allowed requests reach next with the
// rate-limit headers of every applying limit set; denied ones get 429,
// Retry-After (the binding limit's wait, when every limit admits the
// request again) and a JSON body. Rules in shadow mode decide and log but
// never block, and add no headers.
//
// A request lacking a rule's header or query key gets 401 (MISSING_KEY),
// or 429 without Retry-After under policy.DenyMissing; one whose key is
// not valid UTF-8 gets 400 (INVALID_KEY), whatever missing_key says.
// When the store fails, the Limiter's ErrorPolicy decides, and responses
// carry no rate-limit headers, since the numbers would be made up: a
// refusal by DenyOnError is a 503 (the client exceeded nothing), a
// LocalOnError fallback's denial a 429; under ReturnErrors the request
// passes (the engine logs the error).
//
// A request under a rule that settles (policy.Settle: a policy file's
// settle section) is admitted at the rule's reserve and, once the handler
// has returned, settled at the cost its response reports: the rule's
// trailer or header (cost_from header:<name>; a streamed response sets it
// as a trailer at its end), or the body's bytes (cost_from bytes, what a
// client that went away mid-stream was sent). A response that reports no
// cost keeps the reserve. A rule that strips its header removes it, and
// its trailer, before the client sees them. The settle runs before the
// response ends, and a client gone does not cancel it.
//
// A request under a concurrency limit holds a slot from its decision
// until the handler returns or panics, renewed while it runs (its
// lease's ttl bounds how long a slot outlives a process that died, not
// how long a request may take), and one whose handler hijacks the
// connection holds it until the connection is closed.
func New(e *policy.Engine, opts ...Option) func(http.Handler) http.Handler {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, err := e.Decide(r)
			if errors.Is(err, policy.ErrInvalidKey) {
				// Not a store failure: never let it through unlimited.
				httpjson.Error(w, http.StatusBadRequest, "INVALID_KEY", err.Error())
				return
			}
			if err != nil {
				if r.Context().Err() == nil {
					next.ServeHTTP(w, r) // ReturnErrors: unlimited, and logged
				}
				return
			}
			if !o.respond(w, d) {
				return
			}
			if !d.Settled() {
				next.ServeHTTP(w, r)
				return
			}
			sw := newSettleWriter(w, d, e.Logger())
			// The slots the decision holds stay held while the handler
			// runs, however long, and a client gone does not end it.
			stop := d.KeepAlive(context.WithoutCancel(r.Context()))
			defer func() {
				p := recover() // a client gone mid-stream: a proxy aborts
				if c := sw.hijacked; c != nil {
					// The connection outlives the handler: its slots are
					// released when it is closed.
					go func() {
						<-c.closed
						sw.settle(r.Context())
						stop()
					}()
				} else {
					sw.settle(r.Context())
					stop()
				}
				if p != nil {
					panic(p)
				}
			}()
			next.ServeHTTP(sw, r)
		})
	}
}

// respond writes what a decision tells an HTTP client: the rate-limit
// headers when the store decided, and, when the request is refused, the
// whole answer (429, 503 or 401, as New describes). It reports whether the
// request may proceed, in which case the caller goes on to answer it.
func (o options) respond(w http.ResponseWriter, d *policy.Decision) bool {
	if d.Missing != nil {
		msg := "this endpoint needs a client key (" + d.Missing.Key.String() + ")"
		status := http.StatusUnauthorized
		if d.Missing.MissingKey == policy.DenyMissing {
			status = http.StatusTooManyRequests // without Retry-After: waiting would not help
		}
		httpjson.Error(w, status, "MISSING_KEY", msg)
		return false
	}
	if d.Limited() && d.Degraded == sluice.NotDegraded {
		limits, results, binding := d.Limits()
		var pk []byte
		if o.policyKey {
			pk = partitionKey(d)
		}
		SetHeaders(w.Header(), o.headers, limits, results, binding, o.now(), pk)
	}
	if d.Allowed {
		return true
	}
	res := d.Result()
	if d.Degraded == sluice.DegradedDeny {
		// The store is down and the policy refuses: not the client's
		// doing, and no quota to name.
		WriteUnavailable(w, res.RetryAfter)
		return false
	}
	if status, shed := d.Shed(); shed {
		writeShed(w, status, res.RetryAfter, d)
		return false
	}
	writeDenied(w, res.RetryAfter, d.Violated(), o.problem, inFlight(d))
	return false
}

// partitionKey returns the draft's pk of a decision: a hash of the client
// keys of its rules, which tells a client's quotas apart without naming
// the key.
func partitionKey(d *policy.Decision) []byte {
	h := sha256.New()
	for _, a := range d.Applied {
		if !a.Rule.Shadow {
			h.Write([]byte(a.Key))
			h.Write([]byte{0})
		}
	}
	return h.Sum(nil)[:8]
}
