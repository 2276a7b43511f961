package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
)

// MaxBodyBytes is the largest request body the Server reads; a larger one
// answers 413.
const MaxBodyBytes = 64 << 10

// MaxBatchChecks is the most checks one POST /v1/check/batch may hold.
const MaxBatchChecks = 100

// maxListedRules is the most rule names an unknown-rule message lists.
const maxListedRules = 20

// Server is the decision service's HTTP API. It is safe for concurrent use;
// Update swaps the rules atomically (hot reload) without dropping in-flight
// requests. Create it with New.
type Server struct {
	lim   *sluice.Limiter
	rules atomic.Pointer[ruleSet]
	ready func(ctx context.Context) error
	log   *slog.Logger
	now   func() time.Time
	obs   func(rule string, res sluice.MultiResult, shadow bool)
}

// ruleSet is one generation of rules, looked up by name.
type ruleSet struct {
	byName map[string]*config.Rule
	names  []string // sorted
}

// Option configures a Server.
type Option func(*Server)

// WithReady sets the readiness probe: GET /readyz answers 503 with f's
// error while f fails, and 200 when it returns nil. f gets the request's
// context. Without it the Server is always ready.
func WithReady(f func(ctx context.Context) error) Option {
	return func(s *Server) { s.ready = f }
}

// WithLogger sets the logger of store errors and shadow denials; default
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) { s.log = l }
}

// WithClock sets the clock that X-RateLimit-Reset (in Unix seconds) is
// computed from; default time.Now. Tests use it with the Limiter's clock.
func WithClock(now func() time.Time) Option {
	return func(s *Server) { s.now = now }
}

// New returns a Server deciding with lim under the rules of f. A nil f
// means no rules: every check answers 400 until Update supplies some.
func New(lim *sluice.Limiter, f *config.File, opts ...Option) *Server {
	s := &Server{lim: lim, log: slog.Default(), now: time.Now}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.obs == nil {
		s.obs = func(string, sluice.MultiResult, bool) {}
	}
	s.Update(f)
	return s
}

// Update replaces the rules with those of f, atomically: a request being
// decided completes under the rules it started with, and every request
// that starts after Update returns sees f's. A nil f removes every rule.
// f should be a validated config.File (from config.Load or config.Parse);
// the Server keeps its own copy of the rules, with their limits named as
// httplimit.New names them (config.Rule.WithLimitNames), so that a rule
// built in code shares its counts with the same rule in a middleware.
func (s *Server) Update(f *config.File) {
	rs := &ruleSet{byName: map[string]*config.Rule{}}
	if f != nil {
		for _, r := range f.Rules {
			r := r.WithLimitNames()
			rs.byName[r.Name] = &r
			rs.names = append(rs.names, r.Name)
		}
	}
	slices.Sort(rs.names)
	s.rules.Store(rs)
}

// ServeHTTP answers the API's requests (see the package documentation).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/check":
		if s.allowMethods(w, r, http.MethodPost) && s.jsonBody(w, r) {
			s.check(w, r)
		}
	case "/v1/check/batch":
		if s.allowMethods(w, r, http.MethodPost) && s.jsonBody(w, r) {
			s.batch(w, r)
		}
	case "/healthz":
		if s.allowMethods(w, r, http.MethodGet, http.MethodHead) {
			httplimit.WriteJSON(w, http.StatusOK, statusBody{Status: "ok"})
		}
	case "/readyz":
		if s.allowMethods(w, r, http.MethodGet, http.MethodHead) {
			s.readyz(w, r)
		}
	default:
		httplimit.WriteError(w, http.StatusNotFound, "NOT_FOUND",
			fmt.Sprintf("no endpoint at %s; the API serves POST /v1/check, POST /v1/check/batch, GET /healthz and GET /readyz", r.URL.Path))
	}
}

// allowMethods answers 405 with Allow unless r's method is one of methods.
func (s *Server) allowMethods(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	allow := strings.Join(methods, ", ")
	w.Header().Set("Allow", allow)
	httplimit.WriteError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED",
		fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, allow))
	return false
}

// jsonBody answers 415 unless r's Content-Type is application/json or
// absent.
func (s *Server) jsonBody(w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return true
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return true
	}
	httplimit.WriteError(w, http.StatusUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE",
		fmt.Sprintf("Content-Type %q is not supported; send application/json", ct))
	return false
}

type statusBody struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		if err := s.ready(r.Context()); err != nil {
			httplimit.WriteJSON(w, http.StatusServiceUnavailable, statusBody{Status: "unavailable", Error: err.Error()})
			return
		}
	}
	httplimit.WriteJSON(w, http.StatusOK, statusBody{Status: "ok"})
}

// checkRequest is the body of /v1/check and one check of a batch.
type checkRequest struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	Cost *int   `json:"cost"`
}

// batchRequest is the body of /v1/check/batch.
type batchRequest struct {
	Checks []checkRequest `json:"checks"`
}

// checkResult is the body of /v1/check and one result of a batch.
type checkResult struct {
	Allowed      bool           `json:"allowed"`
	Limit        int            `json:"limit"`
	Remaining    int            `json:"remaining"`
	ResetAfterMS int64          `json:"reset_after_ms"`
	RetryAfterMS int64          `json:"retry_after_ms"`
	ShadowDenied bool           `json:"shadow_denied,omitempty"`
	Degraded     bool           `json:"degraded,omitempty"`
	Policies     []policyResult `json:"policies"`
}

// policyResult is one limit's part of a decision.
type policyResult struct {
	Name         string `json:"name"`
	Allowed      bool   `json:"allowed"`
	Limit        int    `json:"limit"`
	Remaining    int    `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
}

// batchResponse is the body of /v1/check/batch.
type batchResponse struct {
	Results []checkResult `json:"results"`
	Allowed bool          `json:"allowed"`
}

// resolved is a validated check.
type resolved struct {
	rule   *config.Rule
	key    string
	cost   int
	limits []sluice.Limit
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	var req checkRequest
	if !decode(w, r, &req, `accepted fields: "rule", "key", "cost"`) {
		return
	}
	c, msg := s.rules.Load().resolve(req)
	if msg != "" {
		httplimit.WriteError(w, http.StatusBadRequest, "BAD_REQUEST", msg)
		return
	}
	res, ok := s.decide(w, r, c)
	if !ok {
		return
	}
	body := result(c, res.Results, res.Binding, res.Allowed, res.RetryAfter)
	if res.Degraded == sluice.NotDegraded {
		httplimit.SetHeaders(w.Header(), httplimit.HeadersBoth, c.limits, res.Results, res.Binding, s.now(), nil)
	}
	switch {
	case body.Allowed:
		httplimit.WriteJSON(w, http.StatusOK, body)
	case res.Degraded == sluice.DegradedDeny:
		httplimit.WriteUnavailable(w, res.RetryAfter)
	default:
		w.Header().Set("Retry-After", strconv.Itoa(httplimit.RetryAfterSeconds(res.RetryAfter)))
		httplimit.WriteJSON(w, http.StatusTooManyRequests, body)
	}
}

// decide runs one AllowAll for c. On failure it answers (or, when the
// client is gone, does not) and returns ok = false.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, c resolved) (sluice.MultiResult, bool) {
	res, err := s.lim.AllowAll(r.Context(), httplimit.ClientKey(c.key), c.cost, c.limits...)
	if err == nil {
		s.obs(c.rule.Name, res, c.rule.Shadow)
		if c.rule.Shadow && !res.Allowed {
			s.log.Info("sluice: shadow rule would deny", "rule", c.rule.Name, "retry_after", res.RetryAfter)
		}
		return res, true
	}
	s.fail(w, r, err, c.rule.Name)
	return res, false
}

// fail answers a decision's error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error, rule string) {
	switch {
	case r.Context().Err() != nil:
		// The client is gone; there is nobody to answer.
	case errors.Is(err, sluice.ErrInvalidCost) || errors.Is(err, sluice.ErrInvalidLimit):
		// resolve checks costs first; this is a rule the config let through.
		httplimit.WriteError(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("rule %q: %v", rule, err))
	default:
		s.log.Error("sluice: rate limiter store failed", "rule", rule, "err", err)
		httplimit.WriteUnavailable(w, 0)
	}
}

// resolve validates req under the rules, or returns what is wrong.
func (rs *ruleSet) resolve(req checkRequest) (resolved, string) {
	switch {
	case req.Rule == "":
		return resolved{}, `"rule" is required`
	case req.Key == "":
		return resolved{}, `"key" is required`
	}
	rule := rs.byName[req.Rule]
	if rule == nil {
		switch {
		case len(rs.names) == 0:
			return resolved{}, fmt.Sprintf("unknown rule %q; no rules are configured", req.Rule)
		case len(rs.names) < maxListedRules:
			return resolved{}, fmt.Sprintf("unknown rule %q; known rules: %s", req.Rule, strings.Join(rs.names, ", "))
		}
		return resolved{}, fmt.Sprintf("unknown rule %q (%d rules are configured)", req.Rule, len(rs.names))
	}
	c := resolved{rule: rule, key: req.Key, cost: rule.Cost, limits: rule.LimitsFor(req.Key)}
	if req.Cost != nil {
		c.cost = *req.Cost
	}
	if c.cost < 0 {
		return resolved{}, fmt.Sprintf(`"cost" must not be negative, got %d`, c.cost)
	}
	for _, l := range c.limits {
		if cp := l.Capacity(); c.cost > cp {
			return resolved{}, fmt.Sprintf(`"cost" %d exceeds the capacity %d of limit %q (%s) of rule %q; it could never be admitted`,
				c.cost, cp, l.Name, l.String(), rule.Name)
		}
	}
	return c, ""
}

// result returns the body describing the results of c's limits, rs, of
// which rs[binding] is the binding one, in a decision whose outcome is
// allowed and whose wait is retry.
func result(c resolved, rs []sluice.Result, binding int, allowed bool, retry time.Duration) checkResult {
	br := rs[binding]
	out := checkResult{
		Allowed:      allowed,
		Limit:        br.Limit,
		Remaining:    max(br.Remaining, 0),
		ResetAfterMS: ceilMillis(br.ResetAfter),
		RetryAfterMS: ceilMillis(max(br.RetryAfter, retry)),
		Degraded:     br.Degraded != sluice.NotDegraded,
		Policies:     make([]policyResult, len(rs)),
	}
	if allowed {
		out.RetryAfterMS = 0
	}
	for i, r := range rs {
		out.Policies[i] = policyResult{
			Name:         c.limits[i].Name,
			Allowed:      r.Allowed,
			Limit:        r.Limit,
			Remaining:    max(r.Remaining, 0),
			ResetAfterMS: ceilMillis(r.ResetAfter),
			RetryAfterMS: ceilMillis(r.RetryAfter),
		}
	}
	if c.rule.Shadow && !allowed {
		out.Allowed = true
		out.ShadowDenied = true
	}
	return out
}

// ceilMillis returns d in whole milliseconds, rounded up; 0 when d <= 0.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	var req batchRequest
	if !decode(w, r, &req, `accepted fields: "checks", and in each check "rule", "key", "cost"`) {
		return
	}
	if n := len(req.Checks); n < 1 || n > MaxBatchChecks {
		httplimit.WriteError(w, http.StatusBadRequest, "BAD_REQUEST",
			fmt.Sprintf(`"checks" must hold 1 to %d checks, got %d`, MaxBatchChecks, n))
		return
	}
	rules := s.rules.Load() // one generation for the whole batch
	checks := make([]resolved, len(req.Checks))
	type ruleKey struct{ rule, key string }
	seen := map[ruleKey]int{}
	var keys []string // in order of first appearance
	byKey := map[string][]int{}
	for i, cr := range req.Checks {
		c, msg := rules.resolve(cr)
		if msg != "" {
			httplimit.WriteError(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("checks[%d]: %s", i, msg))
			return
		}
		rk := ruleKey{c.rule.Name, c.key}
		if j, dup := seen[rk]; dup {
			httplimit.WriteError(w, http.StatusBadRequest, "BAD_REQUEST",
				fmt.Sprintf("checks[%d]: repeats checks[%d] (rule %q, key %q); list each rule once per key", i, j, c.rule.Name, c.key))
			return
		}
		seen[rk] = i
		checks[i] = c
		if _, ok := byKey[c.key]; !ok {
			keys = append(keys, c.key)
		}
		byKey[c.key] = append(byKey[c.key], i)
	}

	results := make([]checkResult, len(checks))
	single := func(i int) bool {
		res, ok := s.decide(w, r, checks[i])
		if ok {
			results[i] = result(checks[i], res.Results, res.Binding, res.Allowed, res.RetryAfter)
		}
		return ok
	}
	for _, key := range keys {
		var group []int // non-shadow checks of key
		for _, i := range byKey[key] {
			if checks[i].rule.Shadow {
				if !single(i) {
					return
				}
				continue
			}
			group = append(group, i)
		}
		sameCost := true
		for _, i := range group {
			sameCost = sameCost && checks[i].cost == checks[group[0]].cost
		}
		if len(group) <= 1 || !sameCost {
			for _, i := range group {
				if !single(i) {
					return
				}
			}
			continue
		}
		// One atomic decision over the union of the group's limits.
		var union []sluice.Limit
		for _, i := range group {
			union = append(union, checks[i].limits...)
		}
		first := checks[group[0]]
		res, err := s.lim.AllowAll(r.Context(), httplimit.ClientKey(key), first.cost, union...)
		if err != nil {
			s.fail(w, r, err, first.rule.Name)
			return
		}
		off := 0
		for _, i := range group {
			c := checks[i]
			s.obs(c.rule.Name, res, false)
			own := res.Results[off : off+len(c.limits)]
			off += len(c.limits)
			// The binding limit among c's own, not the union's.
			results[i] = result(c, own, sluice.Combine(own).Binding, res.Allowed, res.RetryAfter)
		}
	}
	out := batchResponse{Results: results, Allowed: true}
	for _, res := range results {
		out.Allowed = out.Allowed && res.Allowed
	}
	httplimit.WriteJSON(w, http.StatusOK, out)
}

// decode reads r's body, at most MaxBodyBytes, into v: one JSON object
// with only known fields and nothing after it. Otherwise it answers 400
// or 413 saying what is wrong and returns false. fields lists the
// accepted fields for the unknown-field message.
func decode(w http.ResponseWriter, r *http.Request, v any, fields string) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			httplimit.WriteError(w, http.StatusRequestEntityTooLarge, "TOO_LARGE",
				fmt.Sprintf("the request body exceeds %d bytes", MaxBodyBytes))
			return false
		}
		httplimit.WriteError(w, http.StatusBadRequest, "BAD_REQUEST", "reading the request body: "+err.Error())
		return false
	}
	bad := func(format string, args ...any) bool {
		httplimit.WriteError(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf(format, args...))
		return false
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return bad("the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var (
			syn *json.SyntaxError
			typ *json.UnmarshalTypeError
		)
		switch {
		case errors.As(err, &syn):
			// Offset counts the bytes read, the offending one included.
			return bad("malformed JSON at byte offset %d: %s", max(syn.Offset-1, 0), syn.Error())
		case errors.Is(err, io.ErrUnexpectedEOF):
			return bad("malformed JSON: the body ends at byte offset %d, inside the JSON value", len(data))
		case errors.As(err, &typ):
			if typ.Field == "" {
				return bad("the body must be a JSON object, got %s", typ.Value)
			}
			return bad("field %q must be %s, got %s", typ.Field, jsonType(typ.Type.Kind().String()), typ.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return bad("unknown field %s; %s", strings.TrimPrefix(err.Error(), "json: unknown field "), fields)
		}
		return bad("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")
	if len(rest) > 0 {
		return bad("unexpected data after the JSON object at byte offset %d; send one object", len(data)-len(rest))
	}
	return true
}

// jsonType names a Go kind as JSON does.
func jsonType(kind string) string {
	switch kind {
	case "int", "int64":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct":
		return "an object"
	}
	return "a " + kind
}

// WithObserver registers f to be told of every decision the service makes
// (the rule, its result, and whether the rule is in shadow mode), for
// metrics.
func WithObserver(f func(rule string, res sluice.MultiResult, shadow bool)) Option {
	return func(s *Server) { s.obs = f }
}
