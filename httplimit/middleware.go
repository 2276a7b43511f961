package httplimit

import (
	"crypto/sha256"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
)

// KeyFunc extracts the client key of a request, for example the
// authenticated user stored in its context; ok is false when the request
// has none.
type KeyFunc func(r *http.Request) (key string, ok bool)

// Option configures the middleware.
type Option func(*options)

type options struct {
	headers   HeaderMode
	problem   bool
	policyKey bool
	trusted   []netip.Prefix
	keys      map[string]KeyFunc // by rule name
	now       func() time.Time
	log       *slog.Logger
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

// WithTrustedProxies sets the proxies whose X-Forwarded-For and Forwarded
// hops are believed when a rule is keyed by client IP (see ClientIP).
func WithTrustedProxies(p ...netip.Prefix) Option {
	return func(o *options) { o.trusted = append(o.trusted, p...) }
}

// WithKey makes the rule named rule take its client key from f instead of
// its configured key source: the way to key by an authenticated user.
func WithKey(rule string, f KeyFunc) Option {
	return func(o *options) { o.keys[rule] = f }
}

// WithClock sets the clock used for the epoch seconds of X-RateLimit-Reset
// (default time.Now).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithLogger sets where the middleware logs store failures and shadow
// denials (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// FromConfig returns the options that the http section of a policy file
// sets.
func FromConfig(h config.HTTP) ([]Option, error) {
	mode, err := ParseHeaderMode(h.Headers)
	if err != nil {
		return nil, err
	}
	opts := []Option{WithHeaders(mode), WithTrustedProxies(h.TrustedProxies...)}
	if h.ProblemJSON {
		opts = append(opts, WithProblemJSON())
	}
	if h.PolicyKey {
		opts = append(opts, WithPolicyKey())
	}
	return opts, nil
}

// middleware holds the compiled rules.
type middleware struct {
	lim   *sluice.Limiter
	rules []config.Rule
	mux   *http.ServeMux // patterns of the rules with a match, to find the most specific
	def   int            // index of the default rule, or -1
	opts  options
}

// ruleIndex is what the private mux returns for a matched rule.
type ruleIndex int

func (ruleIndex) ServeHTTP(http.ResponseWriter, *http.Request) {}

// New returns middleware that limits requests by rules, deciding with lim.
//
// Each request is matched to the most specific rule whose ServeMux pattern
// matches it, with http.ServeMux's precedence; a rule without a pattern
// applies to requests no other rule matches; a request that no rule
// matches passes unlimited. The rule's key source names the client, its
// plans choose the limits for that client, and all its limits are decided
// in one atomic call. Allowed requests reach next with the rate-limit
// headers set; denied ones get 429, Retry-After and a JSON body. A rule in
// shadow mode decides and logs but never blocks.
//
// When the store fails, lim's ErrorPolicy decides, and responses carry no
// rate-limit headers, since the numbers would be made up; under
// ReturnErrors the request passes and the error is logged.
//
// Rules from config.Load are valid; New panics, as http.ServeMux does, on
// a malformed or conflicting pattern in rules built by hand.
func New(lim *sluice.Limiter, rules []config.Rule, opts ...Option) func(http.Handler) http.Handler {
	m := &middleware{lim: lim, rules: rules, mux: http.NewServeMux(), def: -1}
	m.opts = options{keys: map[string]KeyFunc{}, now: time.Now, log: slog.Default()}
	for _, o := range opts {
		o(&m.opts)
	}
	for i, r := range rules {
		if r.Match == "" {
			m.def = i
			continue
		}
		m.mux.Handle(r.Match, ruleIndex(i))
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}
}

// match returns the rule for r, or nil.
func (m *middleware) match(r *http.Request) *config.Rule {
	if h, _ := m.mux.Handler(r); h != nil {
		if i, ok := h.(ruleIndex); ok {
			return &m.rules[i]
		}
	}
	if m.def >= 0 {
		return &m.rules[m.def]
	}
	return nil
}

// key returns the client key of r under rule, or ok = false.
func (m *middleware) key(r *http.Request, rule *config.Rule) (string, bool) {
	if f := m.opts.keys[rule.Name]; f != nil {
		return f(r)
	}
	switch rule.Key.Source {
	case "global":
		return "global", true
	case "header":
		v := r.Header.Get(rule.Key.Name)
		return v, v != ""
	case "query":
		v := r.URL.Query().Get(rule.Key.Name)
		return v, v != ""
	}
	return m.clientIP(r)
}

func (m *middleware) clientIP(r *http.Request) (string, bool) {
	addr, ok := ClientIP(r, m.opts.trusted)
	if !ok {
		return "", false
	}
	return addr.String(), true
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	rule := m.match(r)
	if rule == nil {
		next.ServeHTTP(w, r)
		return
	}
	key, ok := m.key(r, rule)
	limits := rule.LimitsFor(key)
	if ok && (rule.Key.Source == "header" || rule.Key.Source == "query" || m.opts.keys[rule.Name] != nil) {
		// Keys from a request's content live apart from the addresses a
		// missing key falls back to, whatever they look like.
		key = "k:" + key
	}
	if !ok {
		switch rule.MissingKey {
		case "ip":
			if key, ok = m.clientIP(r); ok {
				key = "ip:" + key
				limits = rule.Limits
				break
			}
			fallthrough
		case "deny":
			WriteTooManyRequests(w, rule.Limits[0].Period, nil, m.opts.problem)
			return
		default: // "reject"
			WriteError(w, http.StatusUnauthorized, "MISSING_KEY", "this endpoint needs a client key ("+rule.Key.String()+")")
			return
		}
	}
	res, err := m.lim.AllowAll(r.Context(), key, rule.Cost, limits...)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		m.opts.log.Error("sluice: rate limit not applied", "rule", rule.Name, "err", err)
		next.ServeHTTP(w, r)
		return
	}
	if rule.Shadow {
		if !res.Allowed {
			m.opts.log.Info("sluice: shadow rule would deny", "rule", rule.Name, "retry_after", res.RetryAfter)
		}
		next.ServeHTTP(w, r)
		return
	}
	if !res.Degraded {
		policies := make([]Policy, len(limits))
		for i, l := range limits {
			policies[i] = Policy{Name: l.Name, Limit: l}
		}
		var pk []byte
		if m.opts.policyKey {
			sum := sha256.Sum256([]byte(key))
			pk = sum[:8]
		}
		SetHeaders(w.Header(), m.opts.headers, policies, res.Results, res.Binding, m.opts.now(), pk)
	}
	if res.Allowed {
		next.ServeHTTP(w, r)
		return
	}
	var violated []string
	for i, rr := range res.Results {
		if !rr.Allowed {
			violated = append(violated, limits[i].Name)
		}
	}
	WriteTooManyRequests(w, res.RetryAfter, violated, m.opts.problem)
}
