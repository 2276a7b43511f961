//go:build integration

package envoy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
)

// TestJSONHandler: POST /json answers as envoyproxy/ratelimit's: the
// response in protobuf JSON, 429 when over the limit, 400 naming what is
// wrong with a request.
func TestJSONHandler(t *testing.T) {
	cfg, err := LoadConfig("testdata/upstream")
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return upstreamNow }
	svc := NewService(sluice.New(memory.New(), sluice.WithClock(now)), cfg, WithLogger(slog.New(slog.DiscardHandler)))
	svc.now = now
	srv := httptest.NewServer(JSONHandler(svc))
	defer srv.Close()
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	one := `{"domain": "basic", "descriptors": [{"entries": [{"key": "one_per_minute", "value": "j"}]}]}`
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{one, 200, `"overallCode":"OK"`},
		{one, 429, `"overallCode":"OVER_LIMIT"`},
		{one, 429, `"durationUntilReset":"50s"`},
		{`{"domain": "elsewhere", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`, 200, `"statuses":[{"code":"OK"}]`},
		{`{"domain": "basic"`, 400, "not a RateLimitRequest in JSON"},
		{`{"domain": "basic", "descriptors": [{"entries": [{"kee": "k"}]}]}`, 400, `unknown field "kee"`},
		{`{"domain": "basic"}`, 400, "descriptor list must not be empty"},
		{`{"domain": "basic", "descriptors": [` + strings.Repeat(`{"entries": []},`, 70000) + `{}]}`, 413, "larger than 1048576 bytes"},
	} {
		code, body := post(tc.body)
		if code != tc.code || !strings.Contains(strings.ReplaceAll(body, " ", ""), strings.ReplaceAll(tc.want, " ", "")) {
			t.Errorf("POST %.60s: %d %q, want %d with %q", tc.body, code, body, tc.code, tc.want)
		}
	}
}
