package httpjson_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/httpjson"
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

func TestWriteError(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("X-Request-Id", "abc")
	w.Header().Set("Content-Length", "999")
	httpjson.Error(w, http.StatusUnauthorized, "MISSING_KEY", `this endpoint needs an "X-API-Key" header <b>`)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", w.Code)
	}
	for f, want := range map[string]string{
		"Content-Type":           "application/json",
		"X-Content-Type-Options": "nosniff",
		"Cache-Control":          "no-store",
		"X-Request-Id":           "abc",
		"Retry-After":            "",
		"Content-Length":         "",
	} {
		if got := w.Header().Get(f); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
	var body errorJSON
	decodeStrict(t, w.Body.Bytes(), &body)
	if e := body.Error; e.Code != "MISSING_KEY" || e.Message != `this endpoint needs an "X-API-Key" header <b>` || e.RetryAfter != nil {
		t.Errorf("body %s, want MISSING_KEY with the message and no retry_after", w.Body)
	}
	if strings.Contains(w.Body.String(), "<b>") {
		t.Errorf("body %s: HTML not escaped", w.Body)
	}
}

// TestWriteJSON: any value, with the headers of every body; one that
// cannot be marshaled is a 500.
func TestWriteJSON(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("Content-Length", "999")
	w.Header().Set("X-Request-Id", "abc")
	httpjson.Write(w, http.StatusAccepted, "application/json", map[string]any{"allowed": true, "n": 3})
	if w.Code != http.StatusAccepted || w.Body.String() != `{"allowed":true,"n":3}`+"\n" {
		t.Errorf("%d %q, want 202 with the JSON and a newline", w.Code, w.Body)
	}
	for f, want := range map[string]string{
		"Content-Type":           "application/json",
		"X-Content-Type-Options": "nosniff",
		"Cache-Control":          "no-store",
		"X-Request-Id":           "abc",
		"Content-Length":         "",
	} {
		if got := w.Header().Get(f); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}

	w = httptest.NewRecorder()
	httpjson.Write(w, http.StatusOK, "application/json", map[string]any{"f": func() {}})
	var body errorJSON
	decodeStrict(t, w.Body.Bytes(), &body)
	if w.Code != http.StatusInternalServerError || body.Error.Code != "INTERNAL" {
		t.Errorf("unmarshalable value: %d %s, want a 500 INTERNAL error", w.Code, w.Body)
	}
}
