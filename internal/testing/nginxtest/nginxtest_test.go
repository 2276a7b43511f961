package nginxtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBalancer: nginx rotates over the backends one request each, says
// which answered, appends the client to X-Forwarded-For, and passes a
// backend's 429 or failure on as it is, without trying another backend.
func TestBalancer(t *testing.T) {
	var mu sync.Mutex
	xff := map[string]bool{} // X-Forwarded-For values the backends saw
	var backends []string
	var down *httptest.Server // closed below
	for i := range 3 {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			xff[r.Header.Get("X-Forwarded-For")] = true
			mu.Unlock()
			if r.URL.Path == "/limited" {
				w.WriteHeader(http.StatusTooManyRequests)
			}
		}))
		t.Cleanup(s.Close)
		backends = append(backends, strings.TrimPrefix(s.URL, "http://"))
		if i == 2 {
			down = s
		}
	}
	lb := Start(t, backends)
	// A stuck nginx fails the request instead of hanging the test.
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)

	get := func(path string, h http.Header) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", lb.URL+path, nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(UpstreamHeader)
	}

	answered := map[string]int{}
	for range 9 {
		code, up := get("/x", http.Header{"X-Forwarded-For": {"203.0.113.9"}})
		if code != 200 {
			t.Fatalf("status %d from %s", code, up)
		}
		answered[up]++
	}
	for _, b := range backends {
		if answered[b] != 3 {
			t.Errorf("round robin: answered per backend %v, want 3 each of %v", answered, backends)
			break
		}
	}
	if len(xff) != 1 || !xff["203.0.113.9, 127.0.0.1"] {
		t.Errorf("X-Forwarded-For seen by the backends: %v, want the client's chain with nginx's peer appended", xff)
	}

	// A 429 is an answer, not an error: one backend, no retry.
	for range 3 {
		if code, up := get("/limited", nil); code != 429 || strings.Contains(up, ",") {
			t.Errorf("429 from a backend: client got %d from %q, want 429 from one backend", code, up)
		}
	}
	// A backend that is down is a 502, not a retry on the next one.
	down.Close()
	var saw502 bool
	for range 3 {
		code, up := get("/x", nil)
		if strings.Contains(up, ",") {
			t.Errorf("the request was passed on to several backends: %q", up)
		}
		saw502 = saw502 || code == http.StatusBadGateway
	}
	if !saw502 {
		t.Error("no 502 with one of three backends down in three requests")
	}
}
