// Package httpjson writes the JSON bodies of sluice's HTTP doors (the
// middleware's and the proxy's errors, the decision service's and the
// operator API's answers), all with the same header fields, and reads
// their request bodies the one strict way (Decode).
package httpjson

import (
	"encoding/json"
	"net/http"
)

// ErrorBody is the JSON error body: {"error":{"code":...,"message":...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of an ErrorBody.
type ErrorDetail struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"retry_after,omitempty"` // seconds; only on 429, where it is at least 1
}

// Error writes a JSON error {"error":{"code":code,"message":msg}} with
// status. Header fields already set on w are kept.
func Error(w http.ResponseWriter, status int, code, msg string) {
	Write(w, status, "application/json", ErrorBody{Error: ErrorDetail{Code: code, Message: msg}})
}

// Write writes v, marshaled by encoding/json and followed by a newline,
// as a body of contentType with status. It carries X-Content-Type-Options:
// nosniff and Cache-Control: no-store (a decision, or an error about one,
// is good for one request only), and any Content-Length already set is
// dropped, net/http setting the right one. Other header fields already
// set on w are kept. A v that cannot be marshaled is a 500 INTERNAL error
// instead.
func Write(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Not for sluice's own bodies, which hold only strings, ints,
		// bools and slices of them (invalid UTF-8 is replaced, not refused).
		status, contentType = http.StatusInternalServerError, "application/json"
		b, _ = json.Marshal(ErrorBody{Error: ErrorDetail{Code: "INTERNAL", Message: err.Error()}})
	}
	WriteBody(w, status, contentType, append(b, '\n'))
}

// WriteBody writes body, already encoded, as Write writes a marshaled
// value: with status, as a body of contentType, with Write's header
// fields.
func WriteBody(w http.ResponseWriter, status int, contentType string, b []byte) {
	h := w.Header()
	// The three values in one array, each slice capped at its one value
	// (an Add appends elsewhere): one allocation, not three.
	vals := [...]string{contentType, "nosniff", "no-store"}
	h["Content-Type"] = vals[0:1:1]
	h["X-Content-Type-Options"] = vals[1:2:2]
	h["Cache-Control"] = vals[2:3:3]
	h.Del("Content-Length") // one set for another body would be wrong; net/http sets it
	w.WriteHeader(status)
	_, _ = w.Write(b) // a client that went away is nobody to tell
}
