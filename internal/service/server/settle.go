package server

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/policy"
)

// MaxBatchSettles is the most settles one POST /v1/settle/batch may hold.
const MaxBatchSettles = 100

// A reservation, as /v1/check answers it and /v1/settle takes it, is a
// policy.Ticket as base64url (no padding) of compact JSON: opaque to the
// client, and settled by whichever replica receives it, since it holds
// what the store took. It is not signed: a caller of this API may give
// units back under any rule already (a settle by rule and key), so a
// forged reservation can do nothing a caller could not.
type ticketWire struct {
	ID      string     `json:"i"`
	Expires int64      `json:"e"` // Unix microseconds
	Parts   []partWire `json:"p"`
	Slot    string     `json:"sl,omitempty"`
}

type partWire struct {
	Group  int         `json:"g,omitempty"`
	Rule   string      `json:"r"`
	Key    string      `json:"k"`
	Stored string      `json:"s"`
	Cost   int         `json:"c"`
	Limits []limitWire `json:"l"`
}

type limitWire struct {
	Name       string `json:"n"`
	Algorithm  string `json:"a"`
	Period     int64  `json:"p"`  // microseconds
	At         int64  `json:"t"`  // Unix microseconds
	ResetAfter int64  `json:"ra"` // microseconds
}

// encodeTicket returns t as a reservation.
func encodeTicket(t policy.Ticket) string {
	w := ticketWire{ID: t.ID, Expires: t.Expires.UnixMicro(), Parts: make([]partWire, len(t.Parts)), Slot: t.Slot}
	for i, p := range t.Parts {
		pw := partWire{Group: p.Group, Rule: p.Rule, Key: p.Key, Stored: p.Stored, Cost: p.Cost, Limits: make([]limitWire, len(p.Limits))}
		for j, l := range p.Limits {
			pw.Limits[j] = limitWire{Name: l.Name, Algorithm: string(l.Algorithm), Period: l.Period.Microseconds(),
				At: l.At.UnixMicro(), ResetAfter: l.ResetAfter.Microseconds()}
		}
		w.Parts[i] = pw
	}
	b, _ := json.Marshal(w) // strings and integers: never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// errReservation is the error of a reservation this API did not issue.
var errReservation = errors.New(`"reservation" is not one that POST /v1/check or /v1/check/batch issued`)

// decodeTicket returns the ticket of a reservation, or errReservation.
func decodeTicket(s string) (policy.Ticket, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return policy.Ticket{}, errReservation
	}
	var w ticketWire
	if err := json.Unmarshal(b, &w); err != nil || w.ID == "" || len(w.Parts) == 0 {
		return policy.Ticket{}, errReservation
	}
	if len(w.Slot) > sluice.MaxSlotLen {
		return policy.Ticket{}, errReservation
	}
	t := policy.Ticket{ID: w.ID, Expires: time.UnixMicro(w.Expires), Parts: make([]policy.TicketPart, len(w.Parts)), Slot: w.Slot}
	for i, pw := range w.Parts {
		p := policy.TicketPart{Group: pw.Group, Rule: pw.Rule, Key: pw.Key, Stored: pw.Stored, Cost: pw.Cost, Limits: make([]policy.TicketLimit, len(pw.Limits))}
		for j, lw := range pw.Limits {
			alg, err := sluice.ParseAlgorithm(lw.Algorithm)
			if err != nil {
				return policy.Ticket{}, errReservation
			}
			p.Limits[j] = policy.TicketLimit{Name: lw.Name, Algorithm: alg, Period: time.Duration(lw.Period) * time.Microsecond,
				At: time.UnixMicro(lw.At), ResetAfter: time.Duration(lw.ResetAfter) * time.Microsecond}
		}
		t.Parts[i] = p
	}
	return t, nil
}

// settleRequest is the body of /v1/settle and one settle of a batch:
// a reservation and what its work cost, or units to give back under a
// rule and key.
type settleRequest struct {
	Reservation string `json:"reservation"`
	Rule        string `json:"rule"`
	Key         string `json:"key"`
	Cost        *int   `json:"cost"`

	reserved bool // a release: each rule keeps what it reserved
}

// settleFields lists the fields of a settle, for messages.
const settleFields = `"reservation" and "cost", or "rule", "key" and "cost"`

// settleResult is the body of /v1/settle and one result of a batch: the
// state after the settle, as a request of cost 0 would see it (allowed
// false while the client is in debt).
type settleResult struct {
	Allowed bool `json:"allowed"`
	state
	RetryAfterMS int64          `json:"retry_after_ms"`
	Policies     []policyResult `json:"policies"`
}

// settleError is a settle that failed: its status, code and message.
type settleError struct {
	status    int
	code, msg string
}

// settleBatchRequest is the body of /v1/settle/batch.
type settleBatchRequest struct {
	Settles []settleRequest `json:"settles"`
}

// settleBatchItem is one result of /v1/settle/batch: the settle's
// status, and its result or its error.
type settleBatchItem struct {
	Status int `json:"status"`
	*settleResult
	Error *httpjson.ErrorDetail `json:"error,omitempty"`
}

// leaseRequest is the body of /v1/renew and /v1/release: a reservation
// that holds a slot.
type leaseRequest struct {
	Reservation string `json:"reservation"`
}

// renewResult is the body of /v1/renew: the state of the renewed
// limits, and the reservation that replaces the one renewed.
type renewResult struct {
	settleResult
	Reservation string `json:"reservation"`
}

// renew renews the slots of a reservation (policy.Engine.Renew).
func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	var req leaseRequest
	if !httpjson.Decode(w, r, MaxBodyBytes, &req, `accepted fields: "reservation"`) {
		return
	}
	if req.Reservation == "" {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", `"reservation", what POST /v1/check answered under a concurrency limit, is required`)
		return
	}
	t, err := decodeTicket(req.Reservation)
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, "INVALID_RESERVATION", err.Error())
		return
	}
	d, next, err := s.engine.Renew(r.Context(), t)
	if errors.Is(err, sluice.ErrSlotLost) {
		httpjson.Error(w, http.StatusConflict, "SLOT_LOST", "a slot's lease ended before the renewal, and another request may hold it now; stop the work, or check again for a new slot")
		return
	}
	if err != nil {
		if fail := s.settleFailure(r, err, false); fail.status != 0 {
			httpjson.Error(w, fail.status, fail.code, fail.msg)
		}
		return
	}
	httpjson.Write(w, http.StatusOK, "application/json", renewResult{*settled(d), encodeTicket(next)})
}

// release releases the slots of a reservation: a settle at what it
// reserved, so that the rules that settle keep their reserve.
func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	var req leaseRequest
	if !httpjson.Decode(w, r, MaxBodyBytes, &req, `accepted fields: "reservation"`) {
		return
	}
	if req.Reservation == "" {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", `"reservation", what POST /v1/check answered under a concurrency limit, is required`)
		return
	}
	res, fail := s.settleOne(r, settleRequest{Reservation: req.Reservation, reserved: true})
	switch {
	case fail != nil:
		if fail.status != 0 {
			httpjson.Error(w, fail.status, fail.code, fail.msg)
		}
	default:
		httpjson.Write(w, http.StatusOK, "application/json", res)
	}
}

func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	var req settleRequest
	if !httpjson.Decode(w, r, MaxBodyBytes, &req, "accepted fields: "+settleFields) {
		return
	}
	res, fail := s.settleOne(r, req)
	switch {
	case fail != nil:
		if fail.status != 0 {
			httpjson.Error(w, fail.status, fail.code, fail.msg)
		}
	default:
		httpjson.Write(w, http.StatusOK, "application/json", res)
	}
}

// settleBatch settles each settle of the body on its own: one that fails
// leaves the others settled.
func (s *Server) settleBatch(w http.ResponseWriter, r *http.Request) {
	var req settleBatchRequest
	if !httpjson.Decode(w, r, MaxBodyBytes, &req, `accepted fields: "settles", and in each settle `+settleFields) {
		return
	}
	if n := len(req.Settles); n < 1 || n > MaxBatchSettles {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST",
			fmt.Sprintf(`"settles" must hold 1 to %d settles, got %d`, MaxBatchSettles, n))
		return
	}
	out := struct {
		Results []settleBatchItem `json:"results"`
	}{make([]settleBatchItem, len(req.Settles))}
	for i, sr := range req.Settles {
		res, fail := s.settleOne(r, sr)
		switch {
		case fail == nil:
			out.Results[i] = settleBatchItem{Status: http.StatusOK, settleResult: res}
		case fail.status == 0:
			return // the client is gone
		default:
			out.Results[i] = settleBatchItem{Status: fail.status, Error: &httpjson.ErrorDetail{Code: fail.code, Message: fail.msg}}
		}
	}
	httpjson.Write(w, http.StatusOK, "application/json", out)
}

// settleOne settles req: a fail of status 0 when the client is gone.
func (s *Server) settleOne(r *http.Request, req settleRequest) (*settleResult, *settleError) {
	bad := func(msg string) *settleError { return &settleError{http.StatusBadRequest, "BAD_REQUEST", msg} }
	switch {
	case req.Cost != nil && *req.Cost < 0:
		return nil, bad(fmt.Sprintf(`"cost" must not be negative, got %d`, *req.Cost))
	case req.Reservation != "" && (req.Rule != "" || req.Key != ""):
		return nil, bad(`a settle names a "reservation", or a "rule" and "key" to give units back under, not both`)
	case req.Reservation == "" && req.Rule == "":
		return nil, bad(`a settle needs a "reservation" (and its "cost"), or a "rule" (and "key" and "cost" to give back)`)
	case req.Reservation != "" && req.Cost == nil && !req.reserved:
		return nil, bad(`"cost", what the reserved work cost, is required`)
	}
	ctx := r.Context()
	var d *policy.Decision
	var err error
	claimed := false // a failure after the claim cannot be retried
	if req.Reservation != "" {
		t, terr := decodeTicket(req.Reservation)
		if terr != nil {
			return nil, &settleError{http.StatusBadRequest, "INVALID_RESERVATION", terr.Error()}
		}
		d, err = s.engine.Resume(ctx, t)
		if err == nil {
			claimed = true
			err = d.Settle(ctx, func(*policy.Applied) (int, bool) {
				if req.reserved {
					return 0, false // the reserve stands
				}
				return *req.Cost, true
			})
		}
	} else {
		d, err = s.engine.Refund(ctx, policy.Check{Rule: req.Rule, Key: req.Key, Cost: req.Cost})
	}
	if err == nil {
		return settled(d), nil
	}
	return nil, s.settleFailure(r, err, claimed)
}

// settleFailure is the answer to a settle, release or renewal that
// failed with err (status 0: the client is gone); claimed tells that
// the reservation was claimed before it failed.
func (s *Server) settleFailure(r *http.Request, err error, claimed bool) *settleError {
	bad := func(msg string) *settleError { return &settleError{http.StatusBadRequest, "BAD_REQUEST", msg} }
	_, unknown := errors.AsType[*policy.UnknownRuleError](err)
	switch {
	case r.Context().Err() != nil:
		return &settleError{}
	case errors.Is(err, sluice.ErrSettled):
		return &settleError{http.StatusConflict, "ALREADY_SETTLED", "the reservation was settled already; a settle is never applied twice"}
	case errors.Is(err, policy.ErrTicket):
		return &settleError{http.StatusBadRequest, "INVALID_RESERVATION", errReservation.Error()}
	case errors.Is(err, policy.ErrTicketExpired):
		return &settleError{http.StatusGone, "RESERVATION_EXPIRED", "the reservation expired (the longest period of its limits has passed since its take); it keeps what it reserved"}
	case errors.Is(err, policy.ErrTicketStale):
		return &settleError{http.StatusConflict, "RESERVATION_STALE", "the rules changed since the reservation: none of its rules settles now with a limit it still has; it keeps what it reserved"}
	case unknown, errors.Is(err, sluice.ErrInvalidCost), errors.Is(err, policy.ErrInvalidKey):
		return bad(err.Error())
	}
	s.engine.Logger().Error("sluice: settle failed", "err", err)
	msg := "the rate limiter's store failed; nothing was settled, retry later"
	if claimed {
		msg = "the rate limiter's store failed after the reservation was claimed; it keeps what it reserved, and a retry is refused (a settle is never applied twice)"
	}
	return &settleError{http.StatusServiceUnavailable, "STORE_UNAVAILABLE", msg}
}

// settled returns the body of a settled decision: the state of its rules
// together.
func settled(d *policy.Decision) *settleResult {
	out := &settleResult{Allowed: true, Policies: []policyResult{}}
	var rs []sluice.Result
	for i := range d.Applied {
		a := &d.Applied[i]
		for k, r := range a.Results {
			rs = append(rs, r)
			out.Policies = append(out.Policies, policyResult{Name: a.Limits[k].Name, Allowed: r.Allowed, state: stateOf(r), RetryAfterMS: httpjson.Millis(r.RetryAfter)})
		}
	}
	if len(rs) > 0 {
		m := sluice.Combine(rs)
		out.Allowed, out.state, out.RetryAfterMS = m.Allowed, stateOf(m.Result), httpjson.Millis(m.RetryAfter)
	}
	return out
}
