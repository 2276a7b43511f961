package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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
			httpjson.Write(w, http.StatusOK, "application/json", statusBody{Status: "ok"})
		}
	case "/readyz":
		if s.allowMethods(w, r, http.MethodGet, http.MethodHead) {
			s.readyz(w, r)
		}
	default:
		httpjson.Error(w, http.StatusNotFound, "NOT_FOUND",
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
	// Breaker is the state of the store's circuit breaker (readyz only):
	// closed, open (the error policy decides) or half_open.
	Breaker string `json:"breaker,omitempty"`
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	breaker := s.engine.Limiter().Breaker().String()
	if s.ready != nil {
		if err := s.ready(r.Context()); err != nil {
			httpjson.Write(w, http.StatusServiceUnavailable, "application/json", statusBody{Status: "unavailable", Error: err.Error(), Breaker: breaker})
			return
		}
	}
	httpjson.Write(w, http.StatusOK, "application/json", statusBody{Status: "ok", Breaker: breaker})
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
	Allowed bool `json:"allowed"`
	state
	RetryAfterMS int64          `json:"retry_after_ms"`
	ShadowDenied bool           `json:"shadow_denied,omitempty"`
	Degraded     bool           `json:"degraded,omitempty"`
	Policies     []policyResult `json:"policies"`
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
	v := &stateValues{r.Limit, max(r.Remaining, 0), ceilMillis(r.ResetAfter)} // one allocation, not three
	return state{Limit: &v.limit, Remaining: &v.remaining, ResetAfterMS: &v.reset}
}

// stateValues holds the numbers a state points to.
type stateValues struct {
	limit, remaining int
	reset            int64
}

// batchResponse is the body of /v1/check/batch.
type batchResponse struct {
	Results []checkResult `json:"results"`
	Allowed bool          `json:"allowed"`
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	var req checkRequest
	if !decode(w, r, &req, `accepted fields: "rule", "key", "cost"`) {
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

// fastDecoder is a body that decodes the usual shape of itself without
// encoding/json (see decodeFast), reporting false for anything else.
type fastDecoder interface{ decodeFast(data []byte) bool }

// batch decides every check of the body as one request limited by all
// their rules: admitted only if every check's rule admits it, and a
// denied batch spends nothing.
func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	var req batchRequest
	if !decode(w, r, &req, `accepted fields: "checks", and in each check "rule", "key", "cost"`) {
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
		checks[i] = policy.Check{Rule: c.Rule, Key: c.Key, Cost: c.Cost}
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
		Policies: make([]policyResult, len(a.Results)),
	}
	if len(a.Results) == 0 {
		return out // a rule in shadow mode the denied request never reached
	}
	br := a.Result()
	out.state = stateOf(br)
	switch {
	case !d.Allowed:
		out.RetryAfterMS = ceilMillis(max(br.RetryAfter, d.Result().RetryAfter))
	case a.Outcome == policy.ShadowDenied:
		out.RetryAfterMS = ceilMillis(br.RetryAfter) // when it would admit the request
	}
	for i, r := range a.Results {
		out.Policies[i] = policyResult{
			Name:         a.Limits[i].Name,
			Allowed:      r.Allowed,
			state:        stateOf(r),
			RetryAfterMS: ceilMillis(r.RetryAfter),
		}
	}
	if a.Outcome == policy.ShadowDenied {
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

// decode reads r's body, at most MaxBodyBytes, into v: one JSON object
// with only known fields and nothing after it. Otherwise it answers 400
// or 413 saying what is wrong and returns false. fields lists the
// accepted fields for the unknown-field message.
func decode(w http.ResponseWriter, r *http.Request, v any, fields string) bool {
	// Into a buffer of a pool, not a new one grown per request: what is
	// decoded from it is copied out (encoding/json copies strings).
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodyBuffers.Put(buf)
		}
	}()
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	data := buf.Bytes()
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			httpjson.Error(w, http.StatusRequestEntityTooLarge, "TOO_LARGE",
				fmt.Sprintf("the request body exceeds %d bytes", MaxBodyBytes))
			return false
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			// The listener's read deadline (sluice serve's --body-timeout):
			// no addresses in the answer, which net's error would hold.
			httpjson.Error(w, http.StatusRequestTimeout, "REQUEST_TIMEOUT", "the request body did not arrive in time")
			return false
		}
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", "reading the request body: "+err.Error())
		return false
	}
	bad := func(format string, args ...any) bool {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf(format, args...))
		return false
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return bad("the request body is empty; send a JSON object")
	}
	if !utf8.Valid(data) {
		// encoding/json would replace the bytes with U+FFFD, so that
		// distinct keys would share a count.
		return bad("%s", invalidUTF8(data))
	}
	if off := loneSurrogate(data); off >= 0 {
		// The same: encoding/json decodes a lone surrogate to U+FFFD.
		return bad("%s", where(data, off, loneEscape))
	}
	if f, ok := v.(fastDecoder); ok && f.decodeFast(data) {
		return true
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

// bodyBuffers holds the buffers decode reads request bodies into.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest buffer decode returns to bodyBuffers: one
// grown by a rare large batch is left to the garbage collector.
const maxPooledBody = 16 << 10

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

// invalidUTF8 says where data, which is not valid UTF-8, first is not.
func invalidUTF8(data []byte) string {
	off := 0
	for off < len(data) {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	return where(data, off, "is not valid UTF-8")
}

// loneSurrogate returns the offset of the first \u escape in a string of
// data that is half a UTF-16 surrogate pair without its other half, or -1.
// Malformed escapes are left to the decoder.
func loneSurrogate(data []byte) int {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	in := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			in = !in
		case c == '\\' && in:
			r, ok := hex4(i)
			switch {
			case !ok:
				i++ // another escape: skip what it escapes
			case r >= 0xD800 && r <= 0xDBFF:
				if lo, ok := hex4(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
				} else {
					return i
				}
			case r >= 0xDC00 && r <= 0xDFFF:
				return i
			default:
				i += 5
			}
		}
	}
	return -1
}

// where says where in data the byte at off is, which has problem: in the
// field whose string value holds it ("key", "checks[1].key"), or a field
// name, or just at off when the JSON breaks before it.
func where(data []byte, off int, problem string) string {
	// One frame per open object or array: the field or index inside it
	// that the decoder is at.
	type frame struct {
		obj     bool
		wantKey bool
		key     string
		idx     int
	}
	var stack []frame
	done := func() { // a value ended inside the innermost frame
		if len(stack) == 0 {
			return
		}
		if f := &stack[len(stack)-1]; f.obj {
			f.wantKey = true
		} else {
			f.idx++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		str, isStr := tok.(string)
		isKey := isStr && len(stack) > 0 && stack[len(stack)-1].obj && stack[len(stack)-1].wantKey
		if int(dec.InputOffset()) > off {
			// Punctuation and numbers are ASCII: the byte is in this string.
			if !isStr {
				break
			}
			if isKey {
				return fmt.Sprintf("a field name %s (byte offset %d)%s", problem, off, mustBe(problem))
			}
			var path strings.Builder
			for _, f := range stack {
				switch {
				case !f.obj:
					fmt.Fprintf(&path, "[%d]", f.idx)
				case path.Len() > 0:
					path.WriteString("." + f.key)
				default:
					path.WriteString(f.key)
				}
			}
			if path.Len() == 0 {
				break
			}
			return fmt.Sprintf("field %q %s (byte offset %d)%s", path.String(), problem, off, mustBe(problem))
		}
		switch {
		case isKey:
			stack[len(stack)-1].key, stack[len(stack)-1].wantKey = str, false
		case tok == json.Delim('{'):
			stack = append(stack, frame{obj: true, wantKey: true})
		case tok == json.Delim('['):
			stack = append(stack, frame{})
		case tok == json.Delim('}'), tok == json.Delim(']'):
			stack = stack[:len(stack)-1]
			done()
		default:
			done()
		}
	}
	return fmt.Sprintf("the body %s (byte offset %d)%s", problem, off, mustBe(problem))
}

// loneEscape is the problem of a lone surrogate escape.
const loneEscape = "holds half a UTF-16 surrogate pair (an escape from \\ud800 to \\udfff without its other half)"

// mustBe is what follows a problem's offset: the rule it breaks.
func mustBe(problem string) string {
	if problem == loneEscape {
		return "; escape a character beyond U+FFFF as a whole pair, such as \\ud83d\\ude00, or send it as UTF-8"
	}
	return "; JSON text must be UTF-8"
}
