package admin

// The operator API's bodies, shared by the endpoints and by the sluice
// inspect and reset commands that call them. Durations are milliseconds,
// rounded up, as in POST /v1/check's answers.

// InspectPath is the operator API's read of a client's state:
// GET InspectPath?rule=R&key=K[&cost=N][&composite=true]. It spends
// nothing. K may be masked, as sluice top and the dashboard show keys
// (see Top.Unmask). composite says that K joins an Envoy descriptor's
// entries (policy.Check.Composite), as sluice top shows such a key.
const InspectPath = "/admin/v1/inspect"

// ResetPath is the operator API's reset of a client's state: POST
// ResetPath with a ResetRequest body and the bearer token.
const ResetPath = "/admin/v1/reset"

// TokenEnv is the environment variable that holds the operator API's
// bearer token: sluice serve turns its state-changing endpoints (reset)
// on only when it is set, and sluice reset sends it.
const TokenEnv = "SLUICE_ADMIN_TOKEN"

// Inspection is the answer of GET InspectPath: what a request of Cost by
// Key under Rule would get now, limit by limit, without spending
// anything.
type Inspection struct {
	// Rule is the rule's name; Key the client key asked about, as given
	// (masked, when it was asked masked).
	Rule string `json:"rule"`
	Key  string `json:"key"`
	// Cost is the cost asked about: the query's, or the rule's own.
	Cost int `json:"cost"`
	// Shadow reports a rule in shadow mode, which never denies: Allowed
	// then says whether it would.
	Shadow bool `json:"shadow,omitempty"`
	// Allowed reports whether a request of Cost would be admitted now,
	// by every limit of the rule for Key.
	Allowed bool `json:"allowed"`
	// RetryAfterMS is 0 when Allowed; otherwise the wait until such a
	// request would be, if nothing else happened.
	RetryAfterMS int64 `json:"retry_after_ms"`
	// Limits are the limits that apply to Key (the rule's, or its plan's),
	// in order.
	Limits []LimitState `json:"limits"`
}

// LimitState is one limit's part of an Inspection.
type LimitState struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	// Limit requests per Period (a Go duration, such as "1m0s"), with
	// Burst for token_bucket and gcra.
	Limit  int    `json:"limit"`
	Period string `json:"period"`
	Burst  int    `json:"burst,omitempty"`
	// Allowed reports whether this limit alone would admit the request;
	// Remaining is what it would leave (the cost-1 requests admitted
	// after it), or what there is now when it would not admit it.
	Allowed   bool `json:"allowed"`
	Remaining int  `json:"remaining"`
	// ResetAfterMS is the time until the limit is fully recovered,
	// RetryAfterMS the wait until it would admit the request (0 when
	// Allowed).
	ResetAfterMS int64 `json:"reset_after_ms"`
	RetryAfterMS int64 `json:"retry_after_ms"`
}

// MaxResetBytes is the largest body POST ResetPath reads: a larger one is
// refused with 413.
const MaxResetBytes = 64 << 10

// ResetRequest is the body of POST ResetPath. Key may be masked, as for
// InspectPath. Composite says that Key joins an Envoy descriptor's
// entries, as sluice top shows such a key (policy.Check.Composite).
type ResetRequest struct {
	Rule      string `json:"rule"`
	Key       string `json:"key"`
	Composite bool   `json:"composite,omitempty"`
}

// ResetResponse is the answer of a reset that succeeded: Limits is the
// number of limits whose state for Key was forgotten.
type ResetResponse struct {
	Rule   string `json:"rule"`
	Key    string `json:"key"`
	Limits int    `json:"limits"`
}
