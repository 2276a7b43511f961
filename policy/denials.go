package policy

import (
	"math"
	"math/rand/v2"
	"strings"
)

// DefaultDenialLogRate is the share of denials an Engine logs unless
// WithDenialLog says otherwise: one in a hundred, enough to see which
// rules bite and for whom while a flood of denials costs the log a
// hundredth of its lines.
const DefaultDenialLogRate = 0.01

// WithDenialLog makes the engine log, at Info, each denial with
// probability rate (0: none, 1: every one; default DefaultDenialLogRate;
// a rate below 0 or NaN is 0, above 1 is 1): each rule that denied a
// request ("sluice: rate limited") and each rule in shadow mode that
// would have ("sluice: shadow rule would deny"), with the rule, the names
// of the limits that denied, the retry_after of the binding one, and the
// client key masked by MaskKey (in the clear with WithPlainKeys). The
// draw is one random number per denial, without a lock. Looks (checks of
// cost 0) and denials by the error policy while the store fails are not
// logged as denials.
func WithDenialLog(rate float64) EngineOption {
	switch {
	case math.IsNaN(rate) || rate < 0:
		rate = 0
	case rate > 1:
		rate = 1
	}
	return func(e *Engine) { e.denials = rate }
}

// WithPlainKeys makes the denial log (WithDenialLog) show client keys as
// they are when plain is set, instead of masked by MaskKey: for a
// deployment whose logs may hold them.
func WithPlainKeys(plain bool) EngineOption { return func(e *Engine) { e.plainKeys = plain } }

// logDenial logs the denial of a, a rule that denied (or in shadow mode
// would have), if the sampler picks it.
func (e *Engine) logDenial(a *Applied) {
	if e.denials <= 0 || e.denials < 1 && rand.Float64() >= e.denials {
		return
	}
	var names []string
	for i, r := range a.Results {
		if !r.Allowed {
			names = append(names, a.Limits[i].Name)
		}
	}
	key := a.Key
	if !e.plainKeys {
		key = MaskKey(key)
	}
	msg := "sluice: rate limited"
	if a.Rule.Shadow {
		msg = "sluice: shadow rule would deny"
	}
	e.log.Info(msg, "rule", a.Rule.Name, "limits", strings.Join(names, ","), "retry_after", a.Result().RetryAfter, "key", key)
}
