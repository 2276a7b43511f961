package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/policy"
)

// operator serves the operator API's inspect and reset for the engine
// engine returns (nil: an envoyproxy/ratelimit config, which has no
// rules to name). The Handler's door asks for the token before them.
type operator struct {
	engine func() *policy.Engine
	top    *Top         // where a masked key is found; nil: none
	log    *slog.Logger // the resets
	plain  bool         // keys in the clear in the log
}

// current returns the engine the requests of the operator API go to,
// or, without one, answers 501 and returns nil.
func (o operator) current(w http.ResponseWriter) *policy.Engine {
	if o.engine != nil {
		if e := o.engine(); e != nil {
			return e
		}
	}
	httpjson.Error(w, http.StatusNotImplemented, "NOT_IMPLEMENTED",
		"inspect and reset name a rule of a sluice policy file; this server decides an envoyproxy/ratelimit config, which has none")
	return nil
}

// inspect answers GET InspectPath?rule=R&key=K[&cost=N] with an
// Inspection.
func (o operator) inspect(w http.ResponseWriter, r *http.Request) {
	e := o.current(w)
	if e == nil {
		return
	}
	q := r.URL.Query()
	rule := q.Get("rule")
	if rule == "" {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", "rule is required: "+InspectPath+"?rule=R&key=K[&cost=N]")
		return
	}
	c := policy.Check{Rule: rule, Key: q.Get("key")}
	if s := q.Get("cost"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("cost %q is not a non-negative integer", s))
			return
		}
		c.Cost = &n
	}
	if s := q.Get("composite"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("composite %q is not true or false", s))
			return
		}
		c.Composite = b
	}
	asked := c.Key
	key, err := o.unmask(e, c.Rule, c.Key)
	if err != nil {
		operatorError(w, err)
		return
	}
	c.Key = key
	in, err := e.Inspect(r.Context(), c)
	if err != nil {
		operatorError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, "application/json", inspection(asked, in))
}

// unmask returns the client key that key of a request for rule stands
// for: key itself, or, when it has the form of a masked key
// (policy.IsMaskedKey) and rule takes a key, the key the top tracks
// whose mask it is (Top.Unmask), so that an operator can inspect and
// reset the keys sluice top and the dashboard show masked. The answer
// names the key as asked, never the one found: with keys masked, the
// operator API reveals no more than the dashboard does.
func (o operator) unmask(e *policy.Engine, rule, key string) (string, error) {
	if !policy.IsMaskedKey(key) {
		return key, nil
	}
	if r := e.Rules().Rule(rule); r == nil || r.Key.Source == policy.KeyGlobal {
		return key, nil // the engine names the unknown rule; a global rule takes no key
	}
	if o.top == nil {
		return "", fmt.Errorf("%w: %q has the form of a masked key, and this server keeps no top keys to find it among; give the key in the clear", ErrUnknownMask, key)
	}
	return o.top.Unmask(key)
}

// inspection returns the API's body for in, asked about key.
func inspection(key string, in *policy.Inspection) Inspection {
	out := Inspection{Rule: in.Rule.Name, Key: key, Cost: in.Cost, Shadow: in.Rule.Shadow, Allowed: in.Allowed,
		Limits: make([]LimitState, len(in.Limits))}
	if !in.Allowed {
		out.RetryAfterMS = httpjson.Millis(in.Result().RetryAfter)
	}
	for i, l := range in.Limits {
		out.Limits[i] = LimitState{
			Name: l.Limit.Name, Algorithm: l.Limit.Algorithm.String(),
			Limit: l.Limit.Limit, Period: l.Limit.Period.String(), Burst: l.Limit.Burst,
			Allowed: l.Result.Allowed, Remaining: l.Result.Remaining,
			ResetAfterMS: httpjson.Millis(l.Result.ResetAfter), RetryAfterMS: httpjson.Millis(l.Result.RetryAfter),
		}
	}
	return out
}

// reset answers POST ResetPath, which the door let through with the
// bearer token: it forgets the state of the ResetRequest's key under its
// rule.
func (o operator) reset(w http.ResponseWriter, r *http.Request) {
	e := o.current(w)
	if e == nil {
		return
	}
	var req ResetRequest
	if !httpjson.Decode(w, r, MaxResetBytes, &req, `accepted fields: "rule", "key", "composite"`) {
		return
	}
	if req.Rule == "" {
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", `rule is required: {"rule":"R","key":"K"}`)
		return
	}
	key, err := o.unmask(e, req.Rule, req.Key)
	if err != nil {
		operatorError(w, err)
		return
	}
	limits, err := e.Reset(r.Context(), policy.Check{Rule: req.Rule, Key: key, Composite: req.Composite})
	if err != nil {
		operatorError(w, err)
		return
	}
	if !o.plain {
		key = policy.MaskKey(key)
	}
	o.log.Info("sluice: reset", "rule", req.Rule, "key", key, "limits", len(limits), "remote", shownAddr(r.RemoteAddr, o.plain))
	httpjson.Write(w, http.StatusOK, "application/json", ResetResponse{Rule: req.Rule, Key: req.Key, Limits: len(limits)})
}

// operatorError answers err of Inspect or Reset: 400 for a request that
// can never succeed, 501 for a store that cannot be read, 503 when the
// store failed.
func operatorError(w http.ResponseWriter, err error) {
	var unknown *policy.UnknownRuleError
	switch {
	case errors.As(err, &unknown), errors.Is(err, policy.ErrInvalidKey), errors.Is(err, sluice.ErrInvalidCost),
		errors.Is(err, ErrUnknownMask), errors.Is(err, ErrAmbiguousMask):
		httpjson.Error(w, http.StatusBadRequest, "BAD_REQUEST", err.Error())
	case errors.Is(err, errors.ErrUnsupported):
		httpjson.Error(w, http.StatusNotImplemented, "NOT_IMPLEMENTED", err.Error())
	case errors.Is(err, context.Canceled):
		// The operator went away: nobody to answer.
	default:
		httpjson.Error(w, http.StatusServiceUnavailable, "STORE_UNAVAILABLE", err.Error())
	}
}
