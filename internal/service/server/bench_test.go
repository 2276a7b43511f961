package server

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// BenchmarkCheck measures POST /v1/check in process (no network), on
// the memory store, the engine observed and the store instrumented by
// package metrics as sluice serve wires them: the decoding, the
// decision, the headers and the JSON answer of one check.
//
//	go test -run '^$' -bench Check -benchmem ./server/
func BenchmarkCheck(b *testing.B) {
	m := metrics.New()
	lim := sluice.New(memory.New(), sluice.WithHooks(m.Hooks()))
	e := policy.New(lim, compile(b, `
rules:
  - {name: api, key: "header:X-API-Key", algorithm: gcra, limit: 1000000, period: 1s}
`), policy.WithObserver(m.Decision), policy.WithLogger(slog.New(slog.DiscardHandler)))
	srv := New(e)
	bodies := make([]string, 1000)
	for i := range bodies {
		bodies[i] = `{"rule":"api","key":"10.0.` + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + `"}`
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(bodies[i%len(bodies)]))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code, w.Body)
		}
	}
}
