package httplimit_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sluice-go/sluice/httplimit"
)

// decodeStrict decodes a JSON body into v, refusing unknown members, and
// returns its members by name so tests can see which are present.
func decodeStrict(t *testing.T, body []byte, v any) map[string]json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	return members
}

type errorJSON struct {
	Error struct {
		Code       string `json:"code"`
		Message    string `json:"message"`
		RetryAfter *int   `json:"retry_after"`
	} `json:"error"`
}

func TestWriteTooManyRequests(t *testing.T) {
	tests := []struct {
		retryAfter time.Duration
		secs       string
		message    string
	}{
		{12 * time.Second, "12", "rate limit exceeded; retry after 12 seconds"},
		{100 * time.Millisecond, "1", "rate limit exceeded; retry after 1 second"},
		{0, "1", "rate limit exceeded; retry after 1 second"},
		{1500 * time.Millisecond, "2", "rate limit exceeded; retry after 2 seconds"},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		w.Header().Set("RateLimit", `"login-1m";r=0;t=42`)
		httplimit.WriteTooManyRequests(w, tt.retryAfter, []string{"login-1m"}, false)
		if w.Code != http.StatusTooManyRequests {
			t.Errorf("%v: status %d, want 429", tt.retryAfter, w.Code)
		}
		for f, want := range map[string]string{
			"Content-Type":           "application/json",
			"Retry-After":            tt.secs,
			"RateLimit":              `"login-1m";r=0;t=42`,
			"X-Content-Type-Options": "nosniff",
			"Cache-Control":          "no-store",
		} {
			if got := w.Header().Get(f); got != want {
				t.Errorf("%v: %s = %q, want %q", tt.retryAfter, f, got, want)
			}
		}
		var body errorJSON
		members := decodeStrict(t, w.Body.Bytes(), &body)
		e := body.Error
		if len(members) != 1 || e.Code != "RATE_LIMITED" || e.Message != tt.message || e.RetryAfter == nil || *e.RetryAfter != httplimit.RetryAfterSeconds(tt.retryAfter) {
			t.Errorf("%v: body %s, want RATE_LIMITED, %q, retry_after %s", tt.retryAfter, w.Body, tt.message, tt.secs)
		}
	}
}

func TestWriteTooManyRequestsProblem(t *testing.T) {
	tests := []struct {
		violated []string
		want     []string
		detail   string
	}{
		{[]string{"login-1m"}, []string{"login-1m"}, "rate limit exceeded (login-1m); retry after 3 seconds"},
		{[]string{"login-1m", "login-1h"}, []string{"login-1m", "login-1h"}, "rate limit exceeded (login-1m, login-1h); retry after 3 seconds"},
		{nil, []string{}, "rate limit exceeded; retry after 3 seconds"},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		w.Header().Set("RateLimit-Policy", `"login-1m";q=5;w=60`)
		httplimit.WriteTooManyRequests(w, 2500*time.Millisecond, tt.violated, true)
		if w.Code != http.StatusTooManyRequests {
			t.Errorf("%q: status %d, want 429", tt.violated, w.Code)
		}
		for f, want := range map[string]string{
			"Content-Type":     "application/problem+json",
			"Retry-After":      "3",
			"RateLimit-Policy": `"login-1m";q=5;w=60`,
			"Cache-Control":    "no-store",
		} {
			if got := w.Header().Get(f); got != want {
				t.Errorf("%q: %s = %q, want %q", tt.violated, f, got, want)
			}
		}
		var p struct {
			Type     string   `json:"type"`
			Title    string   `json:"title"`
			Status   int      `json:"status"`
			Detail   string   `json:"detail"`
			Violated []string `json:"violated-policies"`
		}
		members := decodeStrict(t, w.Body.Bytes(), &p)
		if len(members) != 5 || string(members["violated-policies"]) == "null" {
			t.Errorf("%q: body %s, want exactly type, title, status, detail and a violated-policies array", tt.violated, w.Body)
		}
		if p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" ||
			p.Title != "Quota Exceeded" || p.Status != 429 || p.Detail != tt.detail || !slices.Equal(p.Violated, tt.want) {
			t.Errorf("%q: problem %+v, want quota-exceeded, 429, %q, %q", tt.violated, p, tt.detail, tt.want)
		}
	}
}

// TestWriteUnavailable: a refusal by DenyOnError says so and carries its
// Retry-After; an unanswered store error carries none.
func TestWriteUnavailable(t *testing.T) {
	for _, tt := range []struct {
		retryAfter time.Duration
		header     string
		message    string
	}{
		{time.Second, "1", "the rate limiter's store is unavailable and the error policy is deny; retry later"},
		{1500 * time.Millisecond, "2", "the rate limiter's store is unavailable and the error policy is deny; retry later"},
		{0, "", "the rate limiter's store is unavailable; retry later"},
	} {
		w := httptest.NewRecorder()
		w.Header().Set("X-Request-Id", "abc")
		httplimit.WriteUnavailable(w, tt.retryAfter)
		var body errorJSON
		decodeStrict(t, w.Body.Bytes(), &body)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != tt.header || w.Header().Get("X-Request-Id") != "abc" ||
			body.Error.Code != "RATE_LIMITER_UNAVAILABLE" || body.Error.Message != tt.message || body.Error.RetryAfter != nil {
			t.Errorf("%v: %d %v %s; want 503 with Retry-After %q saying %q", tt.retryAfter, w.Code, w.Header(), w.Body, tt.header, tt.message)
		}
	}
}
