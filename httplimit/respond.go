package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// quotaExceededType is the problem type of draft-ietf-httpapi-ratelimit-headers-10,
// section 5.1, and its registered title (section 10.2.1).
const (
	quotaExceededType  = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	quotaExceededTitle = "Quota Exceeded"
)

// errorBody is the JSON error body: {"error":{"code":...,"message":...}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"retry_after,omitempty"` // seconds; only on 429, where it is at least 1
}

// quotaProblem is an RFC 9457 problem details object of the quota-exceeded
// type.
type quotaProblem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// WriteTooManyRequests writes a 429 with Retry-After (RetryAfterSeconds of
// retryAfter) and a JSON body:
//
//	{"error":{"code":"RATE_LIMITED","message":"...","retry_after":N}}
//
// where N is the Retry-After. When problem is true the body is instead an
// RFC 9457 application/problem+json object of the quota-exceeded type of
// draft-ietf-httpapi-ratelimit-headers-10:
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Quota Exceeded","status":429,"detail":"...",
//	 "violated-policies":["login-1m"]}
//
// violated names the denying policies, as in the RateLimit field; it may be
// empty. Header fields already set on w (the rate-limit fields) are kept.
func WriteTooManyRequests(w http.ResponseWriter, retryAfter time.Duration, violated []string, problem bool) {
	secs := RetryAfterSeconds(retryAfter)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	wait := "retry after " + strconv.Itoa(secs) + " second"
	if secs != 1 {
		wait += "s"
	}
	if !problem {
		writeJSONBody(w, http.StatusTooManyRequests, "application/json", errorBody{Error: errorDetail{
			Code:       "RATE_LIMITED",
			Message:    "rate limit exceeded; " + wait,
			RetryAfter: secs,
		}})
		return
	}
	detail := "rate limit exceeded; " + wait
	if len(violated) > 0 {
		detail = "rate limit exceeded (" + strings.Join(violated, ", ") + "); " + wait
	}
	if violated == nil {
		violated = []string{} // an array, never null
	}
	writeJSONBody(w, http.StatusTooManyRequests, "application/problem+json", quotaProblem{
		Type:             quotaExceededType,
		Title:            quotaExceededTitle,
		Status:           http.StatusTooManyRequests,
		Detail:           detail,
		ViolatedPolicies: violated,
	})
}

// WriteError writes a JSON error {"error":{"code":code,"message":msg}}
// with status. Header fields already set on w are kept.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	writeJSONBody(w, status, "application/json", errorBody{Error: errorDetail{Code: code, Message: msg}})
}

// WriteUnavailable writes the 503 of a decision the store could not make,
// with a JSON body:
//
//	{"error":{"code":"RATE_LIMITER_UNAVAILABLE","message":"..."}}
//
// It is not a 429: the client exceeded nothing, and there is no quota to
// name. retryAfter is the wait of the refusal that sluice.DenyOnError made
// in the store's place (the MultiResult's RetryAfter): the response then
// carries it as Retry-After (RetryAfterSeconds) and says the error policy
// denied. A retryAfter of 0 or less answers the store's error itself (as
// under sluice.ReturnErrors), without Retry-After: nobody knows when the
// store will be back. Header fields already set on w are kept.
func WriteUnavailable(w http.ResponseWriter, retryAfter time.Duration) {
	msg := "the rate limiter's store is unavailable; retry later"
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds(retryAfter)))
		msg = "the rate limiter's store is unavailable and the error policy is deny; retry later"
	}
	WriteError(w, http.StatusServiceUnavailable, "RATE_LIMITER_UNAVAILABLE", msg)
}

// WriteJSON writes v, marshaled by encoding/json and followed by a
// newline, as an application/json body with status. Like every body this
// package writes, it carries X-Content-Type-Options: nosniff and
// Cache-Control: no-store (a decision, or an error about one, is good for
// one request only), and any Content-Length already set is dropped, net/http
// setting the right one. Other header fields already set on w are kept. A v
// that cannot be marshaled is a 500 INTERNAL error instead.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	writeJSONBody(w, status, "application/json", v)
}

// writeJSONBody writes v as a JSON body of contentType, as WriteJSON
// describes.
func writeJSONBody(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Not for this package's own bodies, which hold only strings, ints
		// and string slices (invalid UTF-8 is replaced, not refused).
		status, contentType = http.StatusInternalServerError, "application/json"
		b, _ = json.Marshal(errorBody{Error: errorDetail{Code: "INTERNAL", Message: err.Error()}})
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length") // one set for another body would be wrong; net/http sets it
	w.WriteHeader(status)
	_, _ = w.Write(b) // a client that went away is nobody to tell
}
