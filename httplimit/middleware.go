package httplimit

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"path"
	"strings"
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
	obs       func(rule string, res sluice.MultiResult, shadow bool)
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

// WithObserver registers f to be told of every decision the middleware
// makes (the rule, its result, and whether the rule is in shadow mode),
// for metrics.
func WithObserver(f func(rule string, res sluice.MultiResult, shadow bool)) Option {
	return func(o *options) { o.obs = f }
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
// rate-limit headers, since the numbers would be made up: a refusal by
// DenyOnError is a 503 (the client exceeded nothing), a LocalOnError
// fallback's denial a 429; under ReturnErrors the request passes and the
// error is logged.
//
// Rules from config.Load are valid. Rules built by hand get the same
// defaults and checks: a cost of 0 means 1, and limits without a Name are
// named as a policy file names them (config.Rule.WithLimitNames), on
// New's own copies, so that limits of different rules do not share counts.
// New panics, as http.ServeMux does, on a rule or plan without a valid
// name (config.ValidName), two rules with one name, a rule without
// limits, an invalid limit or cost, a malformed or conflicting pattern, or
// a WithKey naming no rule.
func New(lim *sluice.Limiter, rules []config.Rule, opts ...Option) func(http.Handler) http.Handler {
	m := &middleware{lim: lim, rules: append([]config.Rule(nil), rules...), mux: http.NewServeMux(), def: -1}
	m.opts = options{keys: map[string]KeyFunc{}, now: time.Now, log: slog.Default(),
		obs: func(string, sluice.MultiResult, bool) {}}
	for _, o := range opts {
		o(&m.opts)
	}
	names := map[string]bool{}
	for i := range m.rules {
		r := &m.rules[i]
		mustBeValid(r)
		if names[r.Name] {
			panic(fmt.Sprintf("httplimit: two rules are named %q; rule names are unique", r.Name))
		}
		names[r.Name] = true
		if r.Match == "" {
			m.def = i
			continue
		}
		m.mux.Handle(r.Match, ruleIndex(i))
	}
	for name := range m.opts.keys {
		if !names[name] {
			panic(fmt.Sprintf("httplimit: WithKey names rule %q, which is not among the rules", name))
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}
}

// mustBeValid checks a rule built by hand as config.Load would have, and
// fills in its default cost and limit names. r is New's copy of the
// caller's rule, whose limits it names in copies (config.Rule.WithLimitNames).
func mustBeValid(r *config.Rule) {
	if !config.ValidName(r.Name) {
		panic(fmt.Sprintf("httplimit: a rule (match %q) has no valid name: %q; a name holds letters, digits, '-', '_' and '.'", r.Match, r.Name))
	}
	if r.Cost == 0 {
		r.Cost = 1
	}
	for i, p := range r.Plans {
		if !config.ValidName(p.Name) {
			panic(fmt.Sprintf("httplimit: rule %q: plans[%d] has no valid name: %q; a name holds letters, digits, '-', '_' and '.'", r.Name, i, p.Name))
		}
	}
	*r = r.WithLimitNames()
	all := append([]sluice.Limit(nil), r.Limits...)
	for _, p := range r.Plans {
		if len(p.Limits) == 0 {
			panic(fmt.Sprintf("httplimit: rule %q: plan %q has no limits", r.Name, p.Name))
		}
		all = append(all, p.Limits...)
	}
	if len(r.Limits) == 0 {
		panic(fmt.Sprintf("httplimit: rule %q has no limits", r.Name))
	}
	for _, l := range all {
		if err := l.Validate(); err != nil {
			panic(fmt.Sprintf("httplimit: rule %q: %v", r.Name, err))
		}
		if r.Cost < 0 || r.Cost > l.Capacity() {
			panic(fmt.Sprintf("httplimit: rule %q: cost %d does not fit in %s", r.Name, r.Cost, l))
		}
	}
}

// match returns the rule for r, or nil. A request that ServeMux would
// redirect (an unclean path such as //login or /a/../login, or a missing
// trailing slash) is matched as the request it would be redirected to, so
// that its spelling cannot dodge its rule.
func (m *middleware) match(r *http.Request) *config.Rule {
	if i, ok := m.lookup(r, r.URL.Path); ok {
		return &m.rules[i]
	}
	clean := cleanPath(r.URL.Path)
	candidates := []string{clean}
	if !strings.HasSuffix(clean, "/") {
		candidates = append(candidates, clean+"/")
	}
	for _, p := range candidates {
		if p == r.URL.Path {
			continue // looked up already
		}
		if i, ok := m.lookup(r, p); ok {
			return &m.rules[i]
		}
	}
	if m.def >= 0 {
		return &m.rules[m.def]
	}
	return nil
}

// lookup matches r, with its path replaced by path, against the patterns.
func (m *middleware) lookup(r *http.Request, path string) (ruleIndex, bool) {
	if path != r.URL.Path {
		u := *r.URL
		u.Path, u.RawPath = path, ""
		r2 := *r
		r2.URL = &u
		r = &r2
	}
	h, _ := m.mux.Handler(r)
	i, ok := h.(ruleIndex)
	return i, ok
}

// cleanPath is path.Clean that keeps a trailing slash, as ServeMux cleans.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// key returns the storage key of r under rule and the limits that apply
// to it, or ok = false when r lacks the key the rule needs. Keys live in
// separate namespaces by where they come from, so that no client can pick
// a value that collides with another source's: "fn:" for a WithKey
// function, "k:" for a header or query value, "ip:" for an address that
// stands in for a missing key, and the bare address for an ip rule.
func (m *middleware) key(r *http.Request, rule *config.Rule) (key string, limits []sluice.Limit, ok bool) {
	if f := m.opts.keys[rule.Name]; f != nil {
		if k, ok := f(r); ok {
			return "fn:" + k, rule.LimitsFor(k), true
		}
		// Without a function key, the rule's own key source applies.
	}
	switch rule.Key.Source {
	case "global":
		return "global", rule.LimitsFor("global"), true
	case "header", "query":
		var v string
		if rule.Key.Source == "header" {
			v = r.Header.Get(rule.Key.Name)
		} else {
			v = r.URL.Query().Get(rule.Key.Name)
		}
		if v != "" {
			return ClientKey(v), rule.LimitsFor(v), true
		}
		if rule.MissingKey == "ip" {
			return "ip:" + m.clientIP(r), rule.Limits, true
		}
		return "", nil, false
	}
	ip := m.clientIP(r)
	return ip, rule.LimitsFor(ip), true
}

// clientIP returns the client's address, or "unknown" when the connection
// has none (a Unix socket): such clients then share one bucket.
func (m *middleware) clientIP(r *http.Request) string {
	addr, ok := ClientIP(r, m.opts.trusted)
	if !ok {
		return "unknown"
	}
	return addr.String()
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	rule := m.match(r)
	if rule == nil {
		next.ServeHTTP(w, r)
		return
	}
	key, limits, ok := m.key(r, rule)
	if !ok {
		msg := "this endpoint needs a client key (" + rule.Key.String() + ")"
		status := http.StatusUnauthorized
		if rule.MissingKey == "deny" {
			status = http.StatusTooManyRequests // without Retry-After: waiting would not help
		}
		WriteError(w, status, "MISSING_KEY", msg)
		return
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
	m.opts.obs(rule.Name, res, rule.Shadow)
	if rule.Shadow {
		if !res.Allowed {
			m.opts.log.Info("sluice: shadow rule would deny", "rule", rule.Name, "retry_after", res.RetryAfter)
		}
		next.ServeHTTP(w, r)
		return
	}
	if res.Degraded == sluice.NotDegraded {
		var pk []byte
		if m.opts.policyKey {
			sum := sha256.Sum256([]byte(key))
			pk = sum[:8]
		}
		SetHeaders(w.Header(), m.opts.headers, limits, res.Results, res.Binding, m.opts.now(), pk)
	}
	if res.Allowed {
		next.ServeHTTP(w, r)
		return
	}
	if res.Degraded == sluice.DegradedDeny {
		// The store is down and the policy refuses: not the client's
		// doing, and no quota to name.
		WriteUnavailable(w, res.RetryAfter)
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

// ClientKey returns the storage key of a client key taken from a request's
// content (a header or query value). The decision service stores the keys
// of its checks the same way, so that the middleware and the service share
// counters for one rule and client.
func ClientKey(v string) string { return "k:" + v }
