package httplimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/policy"
)

// quotaExceededType is the problem type of draft-ietf-httpapi-ratelimit-headers-10,
// section 5.1, and its registered title (section 10.2.1).
const (
	quotaExceededType  = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	quotaExceededTitle = "Quota Exceeded"
)

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
	writeDenied(w, retryAfter, violated, problem, "")
}

// writeDenied is WriteTooManyRequests, whose message, unless it is "",
// is inFlight: a denial by concurrency limits alone, which says so.
func writeDenied(w http.ResponseWriter, retryAfter time.Duration, violated []string, problem bool, inFlight string) {
	secs := RetryAfterSeconds(retryAfter)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	wait := retryWait(secs)
	if !problem {
		msg := "rate limit exceeded; " + wait
		if inFlight != "" {
			msg = inFlight + "; " + wait
		}
		httpjson.Write(w, http.StatusTooManyRequests, "application/json", httpjson.ErrorBody{Error: httpjson.ErrorDetail{
			Code:       "RATE_LIMITED",
			Message:    msg,
			RetryAfter: secs,
		}})
		return
	}
	detail := "rate limit exceeded; " + wait
	if len(violated) > 0 {
		detail = "rate limit exceeded (" + strings.Join(violated, ", ") + "); " + wait
	}
	if inFlight != "" {
		detail = inFlight + "; " + wait
	}
	if violated == nil {
		violated = []string{} // an array, never null
	}
	httpjson.Write(w, http.StatusTooManyRequests, "application/problem+json", quotaProblem{
		Type:             quotaExceededType,
		Title:            quotaExceededTitle,
		Status:           http.StatusTooManyRequests,
		Detail:           detail,
		ViolatedPolicies: violated,
	})
}

// writeShed writes the answer to a request shed (policy.Decision.Shed):
// status (503 unless the rule says otherwise), Retry-After and a JSON
// body that names the rule, the class and the share of the pool it may
// use:
//
//	{"error":{"code":"SHED","message":"...","retry_after":N}}
func writeShed(w http.ResponseWriter, status int, retryAfter time.Duration, d *policy.Decision) {
	secs := RetryAfterSeconds(retryAfter)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	msg := "load shed to keep capacity for higher priorities"
	for i := range d.Applied {
		a := &d.Applied[i]
		if !a.Shed {
			continue
		}
		j := a.Binding
		msg = fmt.Sprintf("load shed: rule %q keeps part of %s for higher priorities, and class %q may use %d of its %d",
			a.Rule.Name, a.Limits[j].Name, a.Class, a.Limits[j].Capacity(), a.Rule.Limits[j].Capacity())
		break
	}
	httpjson.Write(w, status, "application/json", httpjson.ErrorBody{Error: httpjson.ErrorDetail{
		Code:       "SHED",
		Message:    msg + "; " + retryWait(secs),
		RetryAfter: secs,
	}})
}

// retryWait says when to retry, in a 429's or a 503's message: "retry
// after 2 seconds".
func retryWait(secs int) string {
	if secs == 1 {
		return "retry after 1 second"
	}
	return "retry after " + strconv.Itoa(secs) + " seconds"
}

// inFlight returns the message of a denial by concurrency limits alone
// (each violated limit, of limits, is one), or "".
func inFlight(d *policy.Decision) string {
	var names []string
	for _, a := range d.Applied {
		for j, r := range a.Results {
			if r.Allowed {
				continue
			}
			if l := a.Limits[j]; l.Algorithm != sluice.Concurrency {
				return ""
			} else {
				names = append(names, fmt.Sprintf("%s: %d at once", l.Name, l.Limit))
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "too many requests in flight (" + strings.Join(names, ", ") + ")"
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
	httpjson.Error(w, http.StatusServiceUnavailable, "RATE_LIMITER_UNAVAILABLE", msg)
}
