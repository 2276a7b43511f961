package server

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/policy"
)

// MaxBodyBytes is the largest request body the Server reads; a larger one
// answers 413.
const MaxBodyBytes = 64 << 10

// MaxBatchChecks is the most checks one POST /v1/check/batch may hold.
const MaxBatchChecks = 100

// Server is the decision service's HTTP API: a door that translates JSON
// checks to a policy.Engine's Check and its Decision back. It is safe for
// concurrent use; the engine's Update swaps the rules (hot reload) without
// dropping in-flight requests. Create it with New.
type Server struct {
	engine *policy.Engine
	ready  func(ctx context.Context) error
	now    func() time.Time
}

// Option configures a Server.
type Option func(*Server)

// WithReady sets the readiness probe: GET /readyz answers 503 with f's
// error while f fails, and 200 when it returns nil. f gets the request's
// context. Without it the Server is always ready.
func WithReady(f func(ctx context.Context) error) Option {
	return func(s *Server) { s.ready = f }
}

// WithClock sets the clock that X-RateLimit-Reset (in Unix seconds) is
// computed from; default time.Now. Tests use it with the Limiter's clock.
func WithClock(now func() time.Time) Option {
	return func(s *Server) { s.now = now }
}

// New returns a Server deciding with e.
func New(e *policy.Engine, opts ...Option) *Server {
	s := &Server{engine: e, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// route is one endpoint of the Server: its path, the method it answers
// (GET answers HEAD too, as an http.ServeMux pattern's), whether its
// request body is JSON, and its handler.
type route struct {
	method, path string
	json         bool
	serve        func(s *Server, w http.ResponseWriter, r *http.Request)
}

// routes are the Server's endpoints, the one list that ServeHTTP
// dispatches on, its 404 names and Routes reports.
var routes = [...]route{
	{http.MethodPost, "/v1/check", true, (*Server).check},
	{http.MethodPost, "/v1/check/batch", true, (*Server).batch},
	{http.MethodPost, "/v1/settle", true, (*Server).settle},
	{http.MethodPost, "/v1/settle/batch", true, (*Server).settleBatch},
	{http.MethodPost, "/v1/renew", true, (*Server).renew},
	{http.MethodPost, "/v1/release", true, (*Server).release},
	{http.MethodGet, "/healthz", false, func(_ *Server, w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, "application/json", statusBody{Status: "ok"})
	}},
	{http.MethodGet, "/readyz", false, (*Server).readyz},
}

// getOrHead are the methods a GET route answers.
var getOrHead = []string{http.MethodGet, http.MethodHead}

// patterns are the routes as http.ServeMux patterns ("POST /v1/check").
var patterns = func() []string {
	out := make([]string, len(routes))
	for i, rt := range routes {
		out[i] = rt.method + " " + rt.path
	}
	return out
}()

// notFound is the message of the 404 of a path no route serves, after
// the path: the routes, listed.
var notFound = "; the API serves " + strings.Join(patterns[:len(patterns)-1], ", ") + " and " + patterns[len(patterns)-1]

// Routes returns the Server's endpoints as http.ServeMux patterns
// ("POST /v1/check"), in the order of the package documentation: a mux
// that routes every request to the Server (the pattern "/") serves these
// paths and answers any other with a JSON 404.
func (s *Server) Routes() []string { return slices.Clone(patterns) }

// ServeHTTP answers the API's requests (see the package documentation).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for i := range routes {
		rt := &routes[i]
		if r.URL.Path != rt.path {
			continue
		}
		methods := []string{rt.method}
		if rt.method == http.MethodGet {
			methods = getOrHead
		}
		if s.allowMethods(w, r, methods...) && (!rt.json || s.jsonBody(w, r)) {
			rt.serve(s, w, r)
		}
		return
	}
	httpjson.Error(w, http.StatusNotFound, "NOT_FOUND", "no endpoint at "+r.URL.Path+notFound)
}

// allowMethods answers 405 with Allow unless r's method is one of methods.
func (s *Server) allowMethods(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	allow := strings.Join(methods, ", ")
	w.Header().Set("Allow", allow)
	httpjson.Error(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED",
		fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, allow))
	return false
}

// jsonBody answers 415 unless r's Content-Type is application/json or
// absent.
func (s *Server) jsonBody(w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" || ct == "application/json" {
		return true // without parsing: what clients send
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return true
	}
	httpjson.Error(w, http.StatusUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE",
		fmt.Sprintf("Content-Type %q is not supported; send application/json", ct))
	return false
}

type statusBody struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Breaker is the state of the store's circuit breakers (readyz
	// only): closed, open (the error policy decides) or half_open, the
	// worst node's (sluice.Limiter.Breaker).
	Breaker string `json:"breaker,omitempty"`
	// Degraded names the store's nodes that fail (readyz only, a store
	// of several named nodes: a Redis Cluster's masters): those the
	// readiness probe found failing and those whose breaker is not
	// closed.
	Degraded []string `json:"degraded,omitempty"`
	// Nodes are the breakers of the store's named nodes (readyz only).
	Nodes []nodeStatus `json:"nodes,omitempty"`
}

// nodeStatus is one node's breaker in /readyz.
type nodeStatus struct {
	Node    string `json:"node"`
	Breaker string `json:"breaker"`
}

// Serving reports whether err, a readiness probe's error, says that the
// store still decides for some keys: it has a method Serving() bool that
// returns true, as the Redis store's ReadyError does when some Cluster
// masters fail and others serve. GET /readyz then answers 200, status
// "degraded": every replica sees the same Cluster, so taking one out of
// its load balancer would refuse the keys of the masters that serve too.
func Serving(err error) bool {
	var s interface{ Serving() bool }
	return errors.As(err, &s) && s.Serving()
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	lim := s.engine.Limiter()
	body := statusBody{Status: "ok", Breaker: lim.Breaker().String()}
	var failing []string
	if s.ready != nil {
		if err := s.ready(r.Context()); err != nil {
			body.Status, body.Error = "unavailable", err.Error()
			var d interface{ Degraded() []string }
			if errors.As(err, &d) {
				failing = d.Degraded()
			}
			if Serving(err) {
				body.Status = "degraded"
			}
		}
	}
	for _, b := range lim.Breakers() {
		if b.Name == "" {
			continue
		}
		body.Nodes = append(body.Nodes, nodeStatus{Node: b.Name, Breaker: b.State.String()})
		if b.State != sluice.BreakerClosed {
			failing = append(failing, b.Name)
		}
	}
	slices.Sort(failing)
	body.Degraded = slices.Compact(failing)
	code := http.StatusOK
	if body.Status == "unavailable" {
		code = http.StatusServiceUnavailable
	}
	httpjson.Write(w, code, "application/json", body)
}

// checkRequest is the body of /v1/check and one check of a batch.
type checkRequest struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	Cost *int   `json:"cost"`
	// Class is the check's priority class under a rule that sheds by
	// class (policy.Check.Class); a rule that does not ignores it.
	Class string `json:"class"`
}

// batchRequest is the body of /v1/check/batch.
type batchRequest struct {
	Checks []checkRequest `json:"checks"`
}

// checkResult is the body of /v1/check and one result of a batch.
type checkResult struct {
	Allowed bool `json:"allowed"`
	state
	RetryAfterMS int64 `json:"retry_after_ms"`
	ShadowDenied bool  `json:"shadow_denied,omitempty"`
	Degraded     bool  `json:"degraded,omitempty"`
	// Class is the priority class the rule decided the check in, under
	// a rule that sheds by class (policy.Applied.Class): the one the
	// check named, or the lowest.
	Class string `json:"class,omitempty"`
	// Shed reports a denial of a class below the highest: load shed to
	// keep the rest of the capacity for the classes above it
	// (policy.Applied.Shed).
	Shed     bool           `json:"shed,omitempty"`
	Policies []policyResult `json:"policies"`
	// Reservation is the decision's reservation, when a rule that
	// settles admitted it: what POST /v1/settle takes with the cost.
	Reservation string `json:"reservation,omitempty"`
}

// policyResult is one limit's part of a decision.
type policyResult struct {
	Name    string `json:"name"`
	Allowed bool   `json:"allowed"`
	state
	RetryAfterMS int64 `json:"retry_after_ms"`
}

// state is a limit's numbers, or none (nil pointers, left out of the
// body) when the store failed and sluice.AllowOnError or DenyOnError
// decided in its place: those numbers would be made up. The local
// fallback's (sluice.DegradedLocal) are real counts of this process's
// store, and reported.
type state struct {
	Limit        *int   `json:"limit,omitempty"`
	Remaining    *int   `json:"remaining,omitempty"`
	ResetAfterMS *int64 `json:"reset_after_ms,omitempty"`
}

// stateOf returns r's numbers as a body reports them.
func stateOf(r sluice.Result) state {
	if r.Degraded.MadeUp() {
		return state{}
	}
	v := &stateValues{r.Limit, max(r.Remaining, 0), httpjson.Millis(r.ResetAfter)} // one allocation, not three
	return state{Limit: &v.limit, Remaining: &v.remaining, ResetAfterMS: &v.reset}
}

// stateValues holds the numbers a state points to.
type stateValues struct {
	limit, remaining int
	reset            int64
}

// batchResponse is the body of /v1/check/batch.
type batchResponse struct {
	Results     []checkResult `json:"results"`
	Allowed     bool          `json:"allowed"`
	Reservation string        `json:"reservation,omitempty"` // the batch's, as in checkResult
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	var req checkRequest
	if !httpjson.Decode(w, r, MaxBodyBytes, &req, `accepted fields: "rule", "key", "cost", "class"`) {
		return
	}
	d, ok := s.decide(w, r, []checkRequest{req}, false)
	if !ok {
		return
	}
	body := checkResult{Allowed: d.Allowed, Policies: []policyResult{}}
	if len(d.Applied) > 0 {
		body = result(d, &d.Applied[0])
	}
	limits, results, binding := d.Limits()
	if binding < 0 && len(d.Applied) == 1 && len(d.Applied[0].Results) > 0 {
		// A rule in shadow mode is decided apart from the enforced ones:
		// its headers tell its own state.
		a := &d.Applied[0]
		limits, results, binding = a.Limits, a.Results, a.Binding
	}
	if binding >= 0 && !body.Degraded {
		httplimit.SetHeaders(w.Header(), httplimit.HeadersBoth, limits, results, binding, s.now(), nil)
	}
	if t, ok := d.Ticket(); ok {
		body.Reservation = encodeTicket(t)
	}
	switch {
	case d.Allowed:
		writeResult(w, http.StatusOK, &body)
	case d.Degraded == sluice.DegradedDeny:
		httplimit.WriteUnavailable(w, d.Result().RetryAfter)
	default:
		w.Header().Set("Retry-After", strconv.Itoa(httplimit.RetryAfterSeconds(d.Result().RetryAfter)))
		writeResult(w, http.StatusTooManyRequests, &body)
	}
}

// writeResult writes body with status, encoded without reflection when
// appendCheckResult can (as encoding/json would), else by encoding/json.
func writeResult(w http.ResponseWriter, status int, body *checkResult) {
	if b, ok := appendCheckResult(make([]byte, 0, 256), body); ok {
		httpjson.WriteBody(w, status, "application/json", b)
		return
	}
	// A copy, made only here: passing body itself would move every
	// caller's body to the heap.
	httpjson.Write(w, status, "application/json", *body)
}

// batch decides every check of the body as one request limited by all
// their rules: admitted only if every check's rule admits it, and a
// denied batch spends nothing.
func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	var req batchRequest
	if !httpjson.Decode(w, r, MaxBodyBytes, &req, `accepted fields: "checks", and in each check "rule", "key", "cost", "class"`) {
		return
	}
	if n := len(req.Checks); n < 1 || n > MaxBatchChecks {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST",
			fmt.Sprintf(`"checks" must hold 1 to %d checks, got %d`, MaxBatchChecks, n))
		return
	}
	d, ok := s.decide(w, r, req.Checks, true)
	if !ok {
		return
	}
	out := batchResponse{Results: make([]checkResult, len(req.Checks)), Allowed: d.Allowed}
	// d.Applied lists rules in shadow mode last, and leaves them out of a
	// denied decision: find each check's own.
	for i := range out.Results {
		out.Results[i] = checkResult{Allowed: d.Allowed, Policies: []policyResult{}}
	}
	for j := range d.Applied {
		a := &d.Applied[j]
		out.Results[a.Check] = result(d, a)
	}
	if t, ok := d.Ticket(); ok {
		out.Reservation = encodeTicket(t)
	}
	httpjson.Write(w, http.StatusOK, "application/json", out)
}

// decide checks reqs, the checks of a batch or the one of /v1/check, with
// the engine. On failure it answers (or, when the client is gone, does
// not) and returns ok = false; an error about a check of a batch names it
// by its index.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, reqs []checkRequest, batch bool) (*policy.Decision, bool) {
	checks := make([]policy.Check, len(reqs))
	for i, c := range reqs {
		msg := ""
		switch {
		case c.Rule == "":
			msg = `"rule" is required`
		case c.Cost != nil && *c.Cost < 0:
			msg = fmt.Sprintf(`"cost" must not be negative, got %d`, *c.Cost)
		}
		if msg != "" {
			if batch {
				msg = fmt.Sprintf("checks[%d]: %s", i, msg)
			}
			httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", msg)
			return nil, false
		}
		checks[i] = policy.Check{Rule: c.Rule, Key: c.Key, Cost: c.Cost, Class: c.Class}
	}
	d, err := s.engine.Check(r.Context(), checks...)
	_, unknown := errors.AsType[*policy.UnknownRuleError](err)
	switch {
	case err == nil:
		return d, true
	case r.Context().Err() != nil:
		// The client is gone; there is nobody to answer.
	case unknown, errors.Is(err, sluice.ErrInvalidCost), errors.Is(err, sluice.ErrInvalidLimit), errors.Is(err, policy.ErrInvalidKey), errors.Is(err, policy.ErrDuplicateCheck):
		msg := err.Error()
		if batch && len(reqs) == 1 {
			msg = "checks[0]: " + msg // the engine names a check only among several
		}
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", msg)
	default:
		httplimit.WriteUnavailable(w, 0) // the engine logged it
	}
	return nil, false
}

// result returns the body describing a's part of d. A rule in shadow mode
// is decided on its own, after the others: its numbers and its degradation
// are its own.
func result(d *policy.Decision, a *policy.Applied) checkResult {
	out := checkResult{
		Allowed:  d.Allowed,
		Degraded: d.Degraded != sluice.NotDegraded || a.Outcome == policy.DegradedAllowed || a.Outcome == policy.DegradedDenied,
		Class:    a.Class,
		Shed:     a.Shed,
		Policies: make([]policyResult, len(a.Results)),
	}
	if len(a.Results) == 0 {
		return out // a rule in shadow mode the denied request never reached
	}
	br := a.Result()
	out.state = stateOf(br)
	switch {
	case !d.Allowed:
		out.RetryAfterMS = httpjson.Millis(max(br.RetryAfter, d.Result().RetryAfter))
	case a.Outcome == policy.ShadowDenied:
		out.RetryAfterMS = httpjson.Millis(br.RetryAfter) // when it would admit the request
	}
	for i, r := range a.Results {
		out.Policies[i] = policyResult{
			Name:         a.Limits[i].Name,
			Allowed:      r.Allowed,
			state:        stateOf(r),
			RetryAfterMS: httpjson.Millis(r.RetryAfter),
		}
	}
	if a.Outcome == policy.ShadowDenied {
		out.ShadowDenied = true
	}
	return out
}
