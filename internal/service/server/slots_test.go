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
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

const slotsYAML = `
rules:
  - name: exports
    key: request
    limits:
      - {algorithm: concurrency, limit: 2, ttl: 30s}
      - {algorithm: fixed_window, limit: 100, period: 1h}
`

// TestSlots: /v1/check under a concurrency limit acquires a slot and
// answers its reservation, which /v1/release frees on any replica and
// /v1/renew renews, answering the reservation that replaces it; a check
// while every slot is held is denied; a slot's lease ends on its own.
func TestSlots(t *testing.T) {
	clock := storetest.NewClock()
	store := memory.New(memory.WithClock(clock.Now))
	f := setupWith(t, sluice.New(store, sluice.WithClock(clock.Now)), clock, slotsYAML)
	other := setupWith(t, sluice.New(store, sluice.WithClock(clock.Now)), clock, slotsYAML) // another replica

	a := f.reserve(`{"rule":"exports","key":"k"}`)
	b := other.reserve(`{"rule":"exports","key":"k"}`)
	w := f.check("exports", "k", 1)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "30" {
		t.Fatalf("a third in flight: %d %s Retry-After %q, want 429 after 30s", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	if p := w.Header().Get("RateLimit-Policy"); !strings.Contains(p, `"exports-concurrent";q=2;qu="concurrent-requests"`) {
		t.Errorf("RateLimit-Policy %s", p)
	}
	// Renewed 20s later, a's lease ends 30s after that; b's at 30s.
	clock.Set(20 * time.Second)
	w = other.post("/v1/renew", fmt.Sprintf(`{"reservation":%q}`, a))
	renewed := reservationOf(t, w)
	if w.Code != 200 || renewed == "" || renewed == a {
		t.Fatalf("renew: %d %s", w.Code, w.Body)
	}
	// The renewed reservation replaces a: a releases nothing now.
	if w := f.post("/v1/release", fmt.Sprintf(`{"reservation":%q}`, a)); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "ALREADY_SETTLED") {
		t.Errorf("the renewed reservation released: %d %s, want 409 ALREADY_SETTLED", w.Code, w.Body)
	}
	// At 30s b's lease has ended, never renewed: its slot is free, and a
	// renewal of it comes too late.
	clock.Set(30 * time.Second)
	if w := f.post("/v1/renew", fmt.Sprintf(`{"reservation":%q}`, b)); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "SLOT_LOST") {
		t.Errorf("a renewal after the lease ended: %d %s, want 409 SLOT_LOST", w.Code, w.Body)
	}
	c := f.reserve(`{"rule":"exports","key":"k"}`)
	if w := f.check("exports", "k", 1); w.Code != http.StatusTooManyRequests {
		t.Errorf("with the renewed slot and a new one held: %d, want 429", w.Code)
	}
	// Released on the other replica: a slot is free, and the rate limit
	// keeps every admitted check's count.
	w = other.post("/v1/release", fmt.Sprintf(`{"reservation":%q}`, renewed))
	if w.Code != 200 || !strings.Contains(w.Body.String(), `{"name":"exports-concurrent","allowed":true,"limit":2,"remaining":1,`) {
		t.Fatalf("release: %d %s", w.Code, w.Body)
	}
	if w := f.post("/v1/release", fmt.Sprintf(`{"reservation":%q}`, renewed)); w.Code != http.StatusConflict {
		t.Errorf("a second release: %d %s, want 409", w.Code, w.Body)
	}
	f.reserve(`{"rule":"exports","key":"k"}`)
	if w := f.post("/v1/release", fmt.Sprintf(`{"reservation":%q}`, c)); w.Code != 200 {
		t.Errorf("release c: %d %s", w.Code, w.Body)
	}
	if got := f.remaining("exports", "k"); got != "1" {
		t.Errorf("slots free: %s, want 1", got)
	}
	for _, tc := range []struct{ path, body, code string }{
		{"/v1/renew", `{}`, "BAD_REQUEST"},
		{"/v1/release", `{"reservation":"nonsense"}`, "INVALID_RESERVATION"},
		{"/v1/renew", `{"reservation":"x","cost":1}`, "BAD_REQUEST"},
	} {
		if w := f.post(tc.path, tc.body); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), tc.code) {
			t.Errorf("%s %s: %d %s, want 400 %s", tc.path, tc.body, w.Code, w.Body, tc.code)
		}
	}
}

// reservationOf returns the reservation of a response's body.
func reservationOf(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var got struct {
		Reservation string `json:"reservation"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	return got.Reservation
}

// TestRenewBody: /v1/renew answers the state of the slots it renewed, as
// a check of cost 0 would see them, and not the rule's other limits,
// which a renewal does not read.
func TestRenewBody(t *testing.T) {
	clock := storetest.NewClock()
	f := setupWith(t, sluice.New(memory.New(memory.WithClock(clock.Now)), sluice.WithClock(clock.Now)), clock, slotsYAML)
	a := f.reserve(`{"rule":"exports","key":"k"}`)
	clock.Set(10 * time.Second)
	w := f.post("/v1/renew", fmt.Sprintf(`{"reservation":%q}`, a))
	var got struct {
		Allowed   bool `json:"allowed"`
		Remaining int  `json:"remaining"`
		Policies  []struct {
			Name      string `json:"name"`
			Remaining int    `json:"remaining"`
			ResetMS   int64  `json:"reset_after_ms"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 {
		t.Fatalf("renew: %d %s (%v)", w.Code, w.Body, err)
	}
	if !got.Allowed || got.Remaining != 1 || len(got.Policies) != 1 || got.Policies[0].Name != "exports-concurrent" || got.Policies[0].Remaining != 1 || got.Policies[0].ResetMS != 30000 {
		t.Errorf("renew with 1 of 2 slots held: %s; want the slot's limit alone, 1 remaining, its lease 30s from now", w.Body)
	}
}
