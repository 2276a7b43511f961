//go:build integration

package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
	"github.com/sluice-go/sluice/store/storetest"
)

const settleYAML = `
rules:
  - {name: tokens, key: request, algorithm: fixed_window, limit: 100000, period: 1m, settle: {cost_from: "header:X-Tokens-Used", reserve: 4096}}
  - {name: calls, key: request, algorithm: fixed_window, limit: 100, period: 1m}
`

// reserve posts body to /v1/check, or a batch's to /v1/check/batch, and
// returns the reservation it answers.
func (f *fixture) reserve(body string) string {
	f.t.Helper()
	path := "/v1/check"
	if strings.HasPrefix(body, `{"checks"`) {
		path = "/v1/check/batch"
	}
	w := f.post(path, body)
	var got struct {
		Allowed     bool   `json:"allowed"`
		Reservation string `json:"reservation"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 || !got.Allowed || got.Reservation == "" {
		f.t.Fatalf("reserve %s: %d %s, want 200 with a reservation", body, w.Code, w.Body)
	}
	return got.Reservation
}

// TestSettle: /v1/check under a rule that settles answers a reservation,
// which /v1/settle settles at the work's cost on any replica sharing the
// store, once; a settle by rule and key gives units back; each mistake
// gets its own status and code.
func TestSettle(t *testing.T) {
	clock := storetest.NewClock()
	store := memory.New(memory.WithClock(clock.Now))
	f := setupWith(t, sluice.New(store, sluice.WithClock(clock.Now)), clock, settleYAML)
	other := setupWith(t, sluice.New(store, sluice.WithClock(clock.Now)), clock, settleYAML) // another replica

	id := f.reserve(`{"rule":"tokens","key":"k"}`)
	if got := f.remaining("tokens", "k"); got != "95904" {
		t.Fatalf("after the reserve: %s left, want 95904", got)
	}
	if got := f.remaining("calls", "k"); got != "100" {
		t.Fatalf("calls after a check of tokens alone: %s, want 100", got)
	}
	f.advance(5 * time.Second)
	w := other.post("/v1/settle", fmt.Sprintf(`{"reservation":%q,"cost":1234}`, id))
	want := `{"allowed":true,"limit":100000,"remaining":98766,"reset_after_ms":55000,"retry_after_ms":0,"policies":[{"name":"tokens-1m","allowed":true,"limit":100000,"remaining":98766,"reset_after_ms":55000,"retry_after_ms":0}]}`
	if w.Code != 200 || body(w) != want {
		t.Errorf("settle on another replica: %d %s\nwant 200 %s", w.Code, body(w), want)
	}
	// A retry, on either replica, is refused and gives nothing back.
	for _, g := range []*fixture{f, other} {
		w := g.post("/v1/settle", fmt.Sprintf(`{"reservation":%q,"cost":0}`, id))
		if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), `"ALREADY_SETTLED"`) {
			t.Errorf("a retried settle: %d %s, want 409 ALREADY_SETTLED", w.Code, w.Body)
		}
	}
	if got := f.remaining("tokens", "k"); got != "98766" {
		t.Errorf("after the retries: %s left, want 98766", got)
	}

	// A batch's reservation settles the rules that settle; the others
	// keep their cost. Above the reserve is a debt: denied after.
	id = f.reserve(`{"checks":[{"rule":"tokens","key":"k"},{"rule":"calls","key":"k"}]}`)
	f.advance(time.Second)
	w = f.post("/v1/settle/batch", fmt.Sprintf(`{"settles":[{"reservation":%q,"cost":100000},{"reservation":%q,"cost":1},{"reservation":"nonsense","cost":1},{"rule":"tokens","key":"k","cost":2000}]}`, id, id))
	var batch struct {
		Results []struct {
			Status    int  `json:"status"`
			Allowed   bool `json:"allowed"`
			Remaining *int `json:"remaining"`
			Error     *struct {
				Code string `json:"code"`
			} `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &batch); err != nil || w.Code != 200 || len(batch.Results) != 4 {
		t.Fatalf("batch: %d %s", w.Code, w.Body)
	}
	r := batch.Results
	// 1234 counted, then 4096 reserved and 95904 charged: 101234 of
	// 100000, a debt of 1234; 2000 given back leaves 766.
	if r[0].Status != 200 || r[0].Allowed || r[0].Remaining == nil || *r[0].Remaining != 0 {
		t.Errorf("settle at 100000: %+v, want 200, denied (a debt), 0 remaining", r[0])
	}
	if r[1].Status != 409 || r[1].Error == nil || r[1].Error.Code != "ALREADY_SETTLED" {
		t.Errorf("the same reservation again: %+v, want 409 ALREADY_SETTLED", r[1])
	}
	if r[2].Status != 400 || r[2].Error == nil || r[2].Error.Code != "INVALID_RESERVATION" {
		t.Errorf("a reservation not issued: %+v, want 400 INVALID_RESERVATION", r[2])
	}
	if r[3].Status != 200 || !r[3].Allowed || r[3].Remaining == nil || *r[3].Remaining != 766 {
		t.Errorf("2000 given back by rule and key, in a debt of 1234: %+v, want 200, allowed, 766 remaining", r[3])
	}
	if got := f.remaining("calls", "k"); got != "99" {
		t.Errorf("calls after the batch's settle: %s, want 99 (it keeps its cost)", got)
	}

	// Expired: a minute after its take.
	id = f.reserve(`{"rule":"tokens","key":"k2"}`)
	f.advance(time.Minute + time.Millisecond)
	if w := f.post("/v1/settle", fmt.Sprintf(`{"reservation":%q,"cost":1}`, id)); w.Code != http.StatusGone || !strings.Contains(w.Body.String(), `"RESERVATION_EXPIRED"`) {
		t.Errorf("a settle after the reservation expired: %d %s, want 410 RESERVATION_EXPIRED", w.Code, w.Body)
	}
	// A reservation whose expiry was moved is none this API issued.
	id = f.reserve(`{"rule":"tokens","key":"k3"}`)
	forged, err := decodeTicket(id)
	if err != nil {
		t.Fatal(err)
	}
	forged.Expires = forged.Expires.Add(time.Hour)
	if w := f.post("/v1/settle", fmt.Sprintf(`{"reservation":%q,"cost":1}`, encodeTicket(forged))); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"INVALID_RESERVATION"`) {
		t.Errorf("a settle of a reservation with a later expiry: %d %s, want 400 INVALID_RESERVATION", w.Code, w.Body)
	}
	// A check of a rule that does not settle holds no reservation.
	if w := f.post("/v1/check", `{"rule":"calls","key":"k"}`); strings.Contains(w.Body.String(), "reservation") {
		t.Errorf("a check of calls: %s, want no reservation", w.Body)
	}

	for _, tt := range []struct{ body, want string }{
		{`{"cost":1}`, `a settle needs a \"reservation\" (and its \"cost\"), or a \"rule\" (and \"key\" and \"cost\" to give back)`},
		{`{"reservation":"x"}`, `\"cost\", what the reserved work cost, is required`},
		{`{"reservation":"x","rule":"tokens","cost":1}`, `a settle names a \"reservation\", or a \"rule\" and \"key\" to give units back under, not both`},
		{`{"rule":"tokens","key":"k","cost":-1}`, `\"cost\" must not be negative, got -1`},
		{`{"rule":"nonesuch","key":"k","cost":1}`, `unknown rule \"nonesuch\"; known rules: calls, tokens`},
		{`{"reservaton":"x"}`, ``},
	} {
		w := f.post("/v1/settle", tt.body)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), tt.want) {
			t.Errorf("settle %s: %d %s, want 400 with %s", tt.body, w.Code, w.Body, tt.want)
		}
	}
}

// TestSettleStoreDown: a settle while Redis is down answers 503 and
// settles nothing; once Redis is back, the same settle succeeds, once.
func TestSettleStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redis.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clock := storetest.NewClock()
	f := setupWith(t, sluice.New(store, sluice.WithClock(clock.Now), sluice.WithErrorPolicy(sluice.ReturnErrors), sluice.WithStoreTimeout(2*time.Second)), clock, settleYAML)
	id := f.reserve(`{"rule":"tokens","key":"k"}`)
	srv.Stop()
	settle := func() *httptest.ResponseRecorder {
		return f.post("/v1/settle", fmt.Sprintf(`{"reservation":%q,"cost":96}`, id))
	}
	if w := settle(); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "nothing was settled, retry later") {
		t.Errorf("a settle with Redis down: %d %s, want 503, nothing settled", w.Code, w.Body)
	}
	srv.Restart(t) // empty: the reservation's take is gone with it
	if w := settle(); w.Code != http.StatusOK {
		t.Errorf("the settle retried once Redis is back: %d %s, want 200", w.Code, w.Body)
	}
	if w := settle(); w.Code != http.StatusConflict {
		t.Errorf("a second settle: %d %s, want 409", w.Code, w.Body)
	}
}
