package admin

import (
	"context"
	"embed"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
)

//go:embed ui
var uiFiles embed.FS

// The paths the Handler serves.
const (
	// adminPrefix holds every path but the page's.
	adminPrefix = "/admin/"
	// PagePath is the dashboard page.
	PagePath = "/"
	// AssetsPrefix is where the page's script and style sheet are.
	AssetsPrefix = "/admin/ui/"
	// StatsPath is the JSON the page reads.
	StatsPath = "/admin/v1/stats"
	// TopPath is the most limited keys as JSON.
	TopPath = "/admin/v1/top"
)

// The bounds of the endpoints' parameters.
const (
	// DefaultTopN is how many keys /admin/v1/top and the page list.
	DefaultTopN = 20
	// DefaultWindow is how many seconds of history /admin/v1/stats
	// returns unless asked (window=N).
	DefaultWindow = 300
	// maxReloads is how many recent reloads are kept.
	maxReloads = 20
	// maxReloadError is the longest reload error kept, in bytes.
	maxReloadError = 4 << 10
	// sampleEvery is how often the metrics are sampled.
	sampleEvery = time.Second
)

// Handler serves the dashboard and the read-only admin API (see the
// package documentation). Create it with New; start its sampling with
// Run. It is safe for concurrent use.
type Handler struct {
	mux     *http.ServeMux
	routes  []string // the patterns Register adds to a mux
	rules   func() []RuleInfo
	limiter func() *sluice.Limiter
	config  func() ConfigInfo
	engine  func() *policy.Engine // for inspect and reset; nil: none
	token   string                // the bearer token; empty: no reset, and under AuthAll no read
	auth    Auth                  // which endpoints need the token
	hosts   Hosts                 // the names answered to besides localhost and addresses
	now     func() time.Time      // the clock of the failed token attempts; nil: real time
	door    *door                 // asks for the token
	guarded http.Handler          // mux behind the Host and Origin checks
	log     *slog.Logger          // where resets and refusals are logged
	met     *metrics.Metrics
	top     *Top
	plain   bool
	history int
	samp    *sampler
	started time.Time

	mu      sync.Mutex
	reloads []Reload // oldest first, at most maxReloads
}

// Option configures a Handler.
type Option func(*Handler)

// WithEngine has the Handler show the rules of the engine that e returns
// (called at each request: the engine may be built after the Handler),
// the state of its Limiter's circuit breaker, and the slots in use of
// each concurrency limit of a rule keyed global, read from its store at
// each GET of StatsPath (SlotsInUse).
func WithEngine(e func() *policy.Engine) Option {
	return func(h *Handler) {
		h.engine = e
		h.rules = func() []RuleInfo {
			if eng := e(); eng != nil {
				return RulesOf(eng.Rules())
			}
			return nil
		}
		h.limiter = func() *sluice.Limiter {
			if eng := e(); eng != nil {
				return eng.Limiter()
			}
			return nil
		}
	}
}

// WithToken turns on the operator API's reset (POST ResetPath), for
// requests that carry token as their bearer token (TokenEnv holds it in
// sluice serve's environment). Without it, or with an empty token, a
// reset is refused with 403. A request with a wrong token is answered
// 401, and counted: past FailuresPerAddress from its address, or
// FailuresTotal from all, every request that needs the token is answered
// 429 for a while.
func WithToken(token string) Option { return func(h *Handler) { h.token = token } }

// WithAuth sets which endpoints need the token (default AuthWrites).
// Under AuthAll without a token, those endpoints answer 403.
func WithAuth(a Auth) Option { return func(h *Handler) { h.auth = a } }

// WithHosts sets the host names the Handler answers to besides localhost
// and IP addresses (see Hosts).
func WithHosts(hs Hosts) Option { return func(h *Handler) { h.hosts = hs } }

// WithClock sets the clock of the failed token attempts' limits (default
// the real time): tests drive them with fixed instants.
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// WithLogger sets where the operator API logs each reset, and each
// request refused for its token (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(h *Handler) { h.log = l } }

// WithRules has the Handler show the rules that f returns (for a
// configuration that is not a policy.RuleSet, such as Envoy's
// descriptors), in place of WithEngine's.
func WithRules(f func() []RuleInfo) Option { return func(h *Handler) { h.rules = f } }

// WithLimiter has the Handler show the circuit breaker of the Limiter f
// returns, in place of WithEngine's.
func WithLimiter(f func() *sluice.Limiter) Option { return func(h *Handler) { h.limiter = f } }

// WithConfig has the Handler show what f says of the configuration.
func WithConfig(f func() ConfigInfo) Option { return func(h *Handler) { h.config = f } }

// WithMetrics has the Handler read decisions, store latency, errors and
// fallbacks from m's registry (the series /metrics serves).
func WithMetrics(m *metrics.Metrics) Option { return func(h *Handler) { h.met = m } }

// WithTop has the Handler report the most limited keys t counts.
func WithTop(t *Top) Option { return func(h *Handler) { h.top = t } }

// WithPlainKeys has the Handler show client keys in the clear; by
// default they are masked (policy.MaskKey).
func WithPlainKeys(plain bool) Option { return func(h *Handler) { h.plain = plain } }

// WithHistory sets how many seconds of per-second history the Handler
// keeps (default DefaultHistory); n <= 0 keeps the default.
func WithHistory(n int) Option {
	return func(h *Handler) {
		if n > 0 {
			h.history = n
		}
	}
}

// New returns a Handler with opts.
func New(opts ...Option) *Handler {
	h := &Handler{
		rules:   func() []RuleInfo { return nil },
		limiter: func() *sluice.Limiter { return nil },
		config:  func() ConfigInfo { return ConfigInfo{} },
		history: DefaultHistory,
		started: time.Now(),
		log:     slog.Default(),
	}
	for _, o := range opts {
		o(h)
	}
	if h.met != nil {
		h.samp = newSampler(h.met.Gatherer(), h.history)
	}
	h.mux = http.NewServeMux()
	h.handle("GET /{$}", asset("ui/index.html", "text/html; charset=utf-8", pageHeaders))
	h.handle("GET "+AssetsPrefix+"app.js", asset("ui/app.js", "text/javascript; charset=utf-8", nil))
	h.handle("GET "+AssetsPrefix+"style.css", asset("ui/style.css", "text/css; charset=utf-8", nil))
	h.handle("GET "+AssetsPrefix+"favicon.svg", asset("ui/favicon.svg", "image/svg+xml", nil))
	h.door = newDoor(h.token, h.log, h.plain, h.now)
	ops := operator{engine: h.engine, top: h.top, log: h.log, plain: h.plain}
	h.handle("GET "+StatsPath, h.read(http.HandlerFunc(h.stats)))
	h.handle("GET "+TopPath, h.read(http.HandlerFunc(h.topKeys)))
	h.handle("GET "+InspectPath, h.read(http.HandlerFunc(ops.inspect)))
	h.handle("POST "+ResetPath, h.door.require(http.HandlerFunc(ops.reset), "RESET_DISABLED",
		"resets are off: start sluice serve with "+TokenEnv+" set in its environment to turn them on"))
	h.mux.HandleFunc("/", h.notFound)
	h.guarded = h.hosts.guard(h.mux)
	return h
}

// read returns next behind the token under AuthAll, else next.
func (h *Handler) read(next http.Handler) http.Handler {
	if h.auth != AuthAll {
		return next
	}
	return h.door.require(next, "TOKEN_UNSET",
		"every endpoint with data needs the bearer token (sluice serve --admin-auth all), and this server has none: start it with "+TokenEnv+" set")
}

// notFound answers a request no route takes: 405 for a path that is
// routed for another method, else 404.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "/" && m != r.Method {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		httpjson.Error(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED",
			fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	httpjson.Error(w, http.StatusNotFound, "NOT_FOUND",
		fmt.Sprintf("no endpoint at %s; the dashboard serves GET %s, GET %s, GET %s, GET %s and POST %s", r.URL.Path, PagePath, StatsPath, TopPath, InspectPath, ResetPath))
}

// handle routes pattern to hh, and lists it for Register.
func (h *Handler) handle(pattern string, hh http.Handler) {
	h.mux.Handle(pattern, hh)
	h.routes = append(h.routes, pattern)
}

// ServeHTTP serves the dashboard's paths, and a JSON 404 for any other:
// the handler of a listener of its own. A request to a Host it does not
// answer to, or a POST from a page of another Origin, is refused first
// (see Hosts).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.guarded.ServeHTTP(w, r) }

// Register routes the dashboard's requests of mux to h: GET / exactly,
// and every path under /admin/ (those h does not serve are answered with
// a JSON 404 or 405), leaving every other request to mux's other
// handlers.
func (h *Handler) Register(mux Mux) {
	for _, p := range h.routes {
		mux.Handle(p, h)
	}
	mux.Handle(adminPrefix, h)
}

// Mux is what Register routes to: an *http.ServeMux, or anything with
// its Handle.
type Mux interface {
	Handle(pattern string, handler http.Handler)
}

// Routes returns the patterns of the endpoints h serves, as
// http.ServeMux patterns ("GET /admin/v1/stats"), in the order of the
// package documentation; h answers any other path with a JSON 404, or
// 405 for a path served for another method.
func (h *Handler) Routes() []string { return slices.Clone(h.routes) }

// Run samples the metrics every second, for the per-second history and
// the latency percentiles, until ctx ends. Without WithMetrics it returns
// at once.
func (h *Handler) Run(ctx context.Context) {
	if h.samp == nil {
		return
	}
	h.samp.sample(time.Now())
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			h.samp.sample(now)
		}
	}
}

// Reload is one reload of the configuration, in Stats.
type Reload struct {
	// Time is when it happened.
	Time time.Time `json:"time"`
	// Outcome is "ok" or "rejected".
	Outcome string `json:"outcome"`
	// Error is why it was rejected ("" when ok).
	Error string `json:"error,omitempty"`
}

// Reloaded records a reload of the configuration that err rejected, or
// that succeeded when err is nil: a policyfile.WithReloadReport.
func (h *Handler) Reloaded(err error) {
	r := Reload{Time: time.Now(), Outcome: "ok"}
	if err != nil {
		r.Outcome, r.Error = "rejected", err.Error()
		if len(r.Error) > maxReloadError {
			r.Error = cutAtRune(r.Error, maxReloadError) + "…"
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.reloads) == maxReloads {
		h.reloads = append(h.reloads[:0], h.reloads[1:]...)
	}
	h.reloads = append(h.reloads, r)
}

// pageHeaders are the page's header fields besides asset's: it loads
// nothing but its own script, style sheet and icon, which the
// Content-Security-Policy enforces.
var pageHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"Referrer-Policy":         "no-referrer",
	"Cache-Control":           "no-store",
}

// asset serves the embedded file name as contentType, with the header
// fields extra besides. It writes the bytes, read once, itself rather
// than through http.FileServer, whose Range and conditional requests a
// page of a few small files does not need (and whose Range parsing
// go1.26.8 bounds badly: GO-2026-6609).
func asset(name, contentType string, extra map[string]string) http.Handler {
	b, err := uiFiles.ReadFile(name)
	if err != nil {
		panic(err) // the file is embedded: a build without it fails
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Type", contentType)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Cache-Control", "no-cache")
		for k, v := range extra {
			hd.Set(k, v)
		}
		_, _ = w.Write(b)
	})
}

// Stats is the body of GET /admin/v1/stats. Its field names are stable.
type Stats struct {
	// Now is when it was made.
	Now time.Time `json:"now"`
	// UptimeSeconds is how long the Handler has run.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Config says what configuration is served.
	Config ConfigInfo `json:"config"`
	// Rules are the rules decided under now.
	Rules []RuleInfo `json:"rules"`
	// Series are the decisions per second of each rule, and the store's.
	Series Series `json:"series"`
	// Slots are the slots of each concurrency limit of the rules, in
	// use across the fleet for a rule keyed global (see SlotsInUse).
	Slots []SlotsInUse `json:"slots"`
	// Store is the store's health.
	Store StoreHealth `json:"store"`
	// Top are the most limited keys.
	Top TopKeys `json:"top"`
	// Reloads are the recent reloads of the configuration, newest first.
	Reloads []Reload `json:"reloads"`
}

// StoreHealth is the store's part of Stats.
type StoreHealth struct {
	// Breaker is the circuit breakers' state, the worst node's: closed,
	// open or half_open.
	Breaker string `json:"breaker"`
	// Nodes are the breakers of the store's named nodes (a Redis
	// Cluster's masters), by node; none for a store of one node.
	Nodes []NodeHealth `json:"nodes,omitempty"`
	// Latency is the take latency of the last minute.
	Latency Latency `json:"latency"`
	// ErrorsPerSecond and DegradedPerSecond are the last step's store
	// errors and fallback decisions per second (Series holds their
	// history).
	ErrorsPerSecond   float64 `json:"errors_per_second"`
	DegradedPerSecond float64 `json:"degraded_per_second"`
}

// NodeHealth is one node's circuit breaker in StoreHealth.
type NodeHealth struct {
	// Node is the node's name: a Cluster master's address.
	Node string `json:"node"`
	// Breaker is its breaker's state: closed, open or half_open.
	Breaker string `json:"breaker"`
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	window, err := intParam(r, "window", DefaultWindow, 1, h.history)
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", err.Error())
		return
	}
	n, err := intParam(r, "n", DefaultTopN, 1, h.topK())
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", err.Error())
		return
	}
	now := time.Now()
	st := Stats{Now: now, UptimeSeconds: round3(now.Sub(h.started).Seconds()), Config: h.config(), Rules: h.rules(), Series: emptySeries()}
	if st.Rules == nil {
		st.Rules = []RuleInfo{}
	}
	st.Store.Breaker = sluice.BreakerClosed.String()
	if lim := h.limiter(); lim != nil {
		st.Store.Breaker = lim.Breaker().String()
		for _, b := range lim.Breakers() {
			if b.Name != "" {
				st.Store.Nodes = append(st.Store.Nodes, NodeHealth{Node: b.Name, Breaker: b.State.String()})
			}
		}
	}
	if h.samp != nil {
		st.Series, st.Store.Latency = h.samp.series(window)
		if k := len(st.Series.StoreErrors); k > 0 {
			st.Store.ErrorsPerSecond = st.Series.StoreErrors[k-1]
			st.Store.DegradedPerSecond = st.Series.Degraded[k-1]
		}
	}
	var e *policy.Engine
	if h.engine != nil {
		e = h.engine()
	}
	st.Slots = slotsInUse(r.Context(), e)
	st.Top = h.topList(n)
	h.mu.Lock()
	st.Reloads = make([]Reload, 0, len(h.reloads))
	for i := len(h.reloads) - 1; i >= 0; i-- {
		st.Reloads = append(st.Reloads, h.reloads[i])
	}
	h.mu.Unlock()
	httpjson.Write(w, http.StatusOK, "application/json", st)
}

// TopKeys is the body of GET /admin/v1/top, and Stats.Top. Its field
// names are stable.
type TopKeys struct {
	// Since and Until bound the span the counts cover (at most two
	// generations of the Top: see Top).
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// SpanSeconds is Until - Since.
	SpanSeconds float64 `json:"span_seconds"`
	// Masked says whether the keys are masked (policy.MaskKey).
	Masked bool `json:"masked"`
	// Counters is how many counters a generation keeps (k); Tracked, how
	// many (rule, key) pairs they hold now.
	Counters int `json:"counters"`
	Tracked  int `json:"tracked"`
	// Counted is how many limiting decisions the span counted.
	Counted uint64 `json:"counted"`
	// Keys are the most limited, most first.
	Keys []TopKey `json:"keys"`
}

// TopKey is one most limited key.
type TopKey struct {
	// Rule is the rule that limited it.
	Rule string `json:"rule"`
	// Key is the client key, masked unless the Handler shows keys plain.
	Key string `json:"key"`
	// Denied is how many decisions the rule denied the key in the span
	// (for a rule in shadow mode, would have denied), at most; at least
	// Denied - Error.
	Denied uint64 `json:"denied"`
	// Error bounds Denied's overestimate.
	Error uint64 `json:"error"`
	// Shadow says the rule is in shadow mode: it denied nothing.
	Shadow bool `json:"shadow"`
}

func (h *Handler) topK() int {
	if h.top == nil {
		return DefaultTopK
	}
	return h.top.K()
}

func (h *Handler) topList(n int) TopKeys {
	out := TopKeys{Masked: !h.plain, Keys: []TopKey{}}
	if h.top == nil {
		return out
	}
	l := h.top.Snapshot(n)
	out.Since, out.Until, out.SpanSeconds = l.Since, l.Until, round3(l.Until.Sub(l.Since).Seconds())
	out.Counters, out.Tracked, out.Counted = l.K, l.Tracked, l.Counted
	for _, e := range l.Entries {
		k := e.Masked
		if h.plain {
			k = e.Key
		}
		out.Keys = append(out.Keys, TopKey{Rule: e.Rule, Key: k, Denied: e.Count, Error: e.Error, Shadow: e.Shadow})
	}
	return out
}

func (h *Handler) topKeys(w http.ResponseWriter, r *http.Request) {
	n, err := intParam(r, "n", DefaultTopN, 1, h.topK())
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", err.Error())
		return
	}
	httpjson.Write(w, http.StatusOK, "application/json", h.topList(n))
}

// cutAtRune returns the first n bytes of s, or fewer so as not to cut a
// UTF-8 sequence (the bytes of a character) in two; s when it is shorter.
func cutAtRune(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return s[:n]
}

// intParam reads the query parameter name as an integer from lo to hi,
// def when absent.
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return min(def, hi), nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%s=%q: want an integer from %d to %d", name, s, lo, hi)
	}
	return v, nil
}
