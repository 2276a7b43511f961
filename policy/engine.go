package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// Engine decides requests under a RuleSet with a Limiter: every door
// (the net/http middleware, the reverse proxy, the decision service's
// HTTP API, Envoy's gRPC) translates its protocol into a call of Decide or
// Check and the Decision back, so that a rule means the same through each,
// and the same rule and client spend one count whichever door they come
// through. It is safe for concurrent use; Update swaps the rules
// atomically (a reload) while decisions in flight finish under the rules
// they started with. Create it with New.
type Engine struct {
	lim     *sluice.Limiter
	set     atomic.Pointer[RuleSet]
	obs     Observer
	settled SettleObserver
	shed    ShedObserver
	slots   SlotObserver
	log     *slog.Logger

	denials   float64 // the share of denials logged (WithDenialLog)
	plainKeys bool    // the denial log shows client keys unmasked (WithPlainKeys)
}

// EngineOption configures an Engine.
type EngineOption func(*Engine)

// Observer is told of the outcome of each rule in each decision, for
// metrics and the dashboard: the rule's name, the client key as the rule
// yields it (Applied.Key: a client's address or a header value, never to
// be a metric label), and the outcome. A check of cost 0, a look at the
// state that spends nothing, decided nothing and is not reported, nor is
// Inspect. It must be safe for concurrent use and quick.
type Observer func(rule, key string, o Outcome)

// WithObserver registers f to be told of every rule's outcome.
func WithObserver(f Observer) EngineOption { return func(e *Engine) { e.obs = f } }

// SettleObserver is told of the units each rule gave back (refunded:
// a settle below the reserve, Engine.Refund) and charged (a settle above
// it) for metrics: the units asked, which a window that has ended since
// the take gives back none of. It must be safe for concurrent use and
// quick.
type SettleObserver func(rule string, refunded, charged int)

// ShedObserver is told of each request a rule shed, and its class (see
// Priority).
type ShedObserver func(rule, class string)

// WithShedObserver registers f to be told of every request shed.
func WithShedObserver(f ShedObserver) EngineOption { return func(e *Engine) { e.shed = f } }

// SlotObserver is told of the slots of concurrency limits that the work
// of a decision holds in this process, for metrics: once per rule of the
// decision that holds one, delta 1 when the work starts holding it
// (Decision.KeepAlive: the middleware's and the proxy's requests, while
// their handler runs) and -1 when it stops (the keep-alive's stop, after
// the settle that released it). A slot that a client of the decision
// service holds (a Check's Ticket, renewed and released through the
// service) is the client's, and is never told. It must be safe for
// concurrent use and quick.
type SlotObserver func(rule string, delta int)

// WithSlotObserver registers f to be told of every slot the work of a
// decision holds, and releases.
func WithSlotObserver(f SlotObserver) EngineOption { return func(e *Engine) { e.slots = f } }

// WithSettleObserver registers f to be told of every settle and refund.
func WithSettleObserver(f SettleObserver) EngineOption { return func(e *Engine) { e.settled = f } }

// WithLogger sets where the engine logs store failures and the denials
// that WithDenialLog samples (default slog.Default()).
func WithLogger(l *slog.Logger) EngineOption { return func(e *Engine) { e.log = l } }

// New returns an Engine deciding with lim under set. A nil set has no
// rules: every request passes unlimited and every Check names an unknown
// rule, until Update supplies some.
func New(lim *sluice.Limiter, set *RuleSet, opts ...EngineOption) *Engine {
	e := &Engine{lim: lim, obs: func(string, string, Outcome) {}, settled: func(string, int, int) {}, log: slog.Default(), denials: DefaultDenialLogRate}
	for _, o := range opts {
		o(e)
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.Update(set)
	return e
}

// Update replaces the rules atomically. A nil set removes every rule.
func (e *Engine) Update(set *RuleSet) {
	if set == nil {
		set = &RuleSet{byName: map[string]*Rule{}}
	}
	e.set.Store(set)
}

// Rules returns the rules the engine decides under now.
func (e *Engine) Rules() *RuleSet { return e.set.Load() }

// Logger returns the logger the engine logs to (WithLogger), for the
// doors to log what they find wrong in a decision's aftermath (a settle
// that failed) where the engine's own messages go.
func (e *Engine) Logger() *slog.Logger { return e.log }

// Limiter returns the Limiter the engine decides with.
func (e *Engine) Limiter() *sluice.Limiter { return e.lim }

// Outcome is what one rule made of one request.
type Outcome uint8

// The outcomes, named for metrics by String.
const (
	// Allowed: the request was admitted, this rule's limits included.
	Allowed Outcome = iota
	// Denied: this rule's limits denied the request.
	Denied
	// DeniedByOther: this rule's limits would have admitted the request,
	// and another rule applying to it denied it; nothing was consumed.
	DeniedByOther
	// ShadowDenied: this rule, in shadow mode, would have denied the
	// request, and let it through.
	ShadowDenied
	// DegradedAllowed: the store failed and the error policy admitted.
	DegradedAllowed
	// DegradedDenied: the store failed and the error policy, or its local
	// fallback, denied.
	DegradedDenied
	// Shed: this rule, which sheds by class (Rule.Priority), denied the
	// request as one of a class below the highest (Applied.Shed).
	Shed
)

// Outcomes lists every Outcome, for metrics that show every series from
// the start.
var Outcomes = []Outcome{Allowed, Denied, DeniedByOther, ShadowDenied, DegradedAllowed, DegradedDenied, Shed}

var outcomeNames = [...]string{"allowed", "denied", "denied_by_other", "shadow_denied", "degraded_allowed", "degraded_denied", "shed"}

// String returns the outcome's name, such as "shadow_denied".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", o)
}

// Applied is one rule's part of a decision.
type Applied struct {
	// Rule is the compiled rule.
	Rule *Rule
	// Key is the client key, as the rule's key source yields it: the
	// address (an IPv6 client's prefix), the header or query value.
	Key string
	// Limits are the limits that applied: the rule's, or its plan's for
	// Key. They are the compiled rule's: read, never modify.
	Limits []sluice.Limit
	// Cost is what the request spent, or would have.
	Cost int
	// Results holds one Result per limit.
	Results []sluice.Result
	// Binding is the index of the binding limit in Results.
	Binding int
	// Outcome is what the rule made of the request.
	Outcome Outcome
	// Check is the index of the Check it answers, for Engine.Check and
	// Engine.Refund.
	Check int
	// Class is the request's priority class under a rule that sheds by
	// class (Rule.Priority), whose share of the capacity Limits are cut
	// to; "" under any other rule.
	Class string
	// Shed reports that the rule denied the request as one of a class
	// below the highest: load shed, to keep capacity for the classes
	// above it (see Priority).
	Shed bool

	stored     string // the key in the store
	spend      int    // what the request spends: Cost, or 0 for a look
	impossible bool   // a rule in shadow mode given a cost it never admits

	// reserved is the reservation the rule's part is in when a rule of
	// its decision settles (Rule.Settle), part its index there; resumeAt
	// holds a resumed part's instants until its reservation is made.
	reserved *sluice.Reservation
	part     int
	resumeAt []time.Time
}

// Result returns the binding limit's Result, or the zero Result when the
// rule has none (a rule in shadow mode that was not decided).
func (a *Applied) Result() sluice.Result {
	if a.Binding >= len(a.Results) {
		return sluice.Result{}
	}
	return a.Results[a.Binding]
}

// Decision is the outcome of one request under every rule that applies
// to it.
type Decision struct {
	// Allowed reports whether the request may proceed: every rule that
	// applies admitted it (rules in shadow mode never deny), or no rule
	// applies.
	Allowed bool
	// Applied holds the rules that applied, in the order of their groups,
	// those in shadow mode last. It is empty when no rule matched. Rules
	// in shadow mode are left out when the request was denied, or when
	// the store could not decide them.
	Applied []Applied
	// Missing is the rule whose key the request lacks, or nil. Such a
	// request is refused without any count being spent: with 401 under
	// RejectMissing, 429 under DenyMissing.
	Missing *Rule
	// Degraded is not sluice.NotDegraded when the store failed and the
	// Limiter's ErrorPolicy decided; the numbers are then not the store's.
	Degraded sluice.Degradation

	enforced int // Applied[:enforced] are the rules not in shadow mode
	binding  int // index of the binding limit among those rules', flattened; -1 if none

	settled SettleObserver // the engine's, told of Settle's units
	slots   SlotObserver   // the engine's, told of KeepAlive's slots
}

// Limited reports whether rules not in shadow mode decided the request:
// whether rate-limit headers have anything to say.
func (d *Decision) Limited() bool { return d.binding >= 0 }

// Limits returns the limits of every rule not in shadow mode that
// decided the request, and their Results, in order, flattened, with the
// index of the binding one: the limit that denied with the longest wait,
// or, when admitted, the one with the fewest remaining. binding is -1 when
// there are none.
func (d *Decision) Limits() (limits []sluice.Limit, results []sluice.Result, binding int) {
	for _, a := range d.Applied[:d.enforced] {
		limits = append(limits, a.Limits...)
		results = append(results, a.Results...)
	}
	return limits, results, d.binding
}

// Result returns the binding limit's Result (the zero Result when no rule
// decided the request). When denied, its RetryAfter is the wait until
// every rule admits the request.
func (d *Decision) Result() sluice.Result {
	if d.binding < 0 {
		return sluice.Result{Allowed: d.Allowed}
	}
	i := d.binding
	for _, a := range d.Applied[:d.enforced] {
		if i < len(a.Results) {
			return a.Results[i]
		}
		i -= len(a.Results)
	}
	return sluice.Result{Allowed: d.Allowed}
}

// Shed reports whether the request was shed: denied, and every rule that
// denied it denied it as one of a class below the highest (see
// Priority). It returns the status to answer with, the first such
// rule's Priority.Status (503 unless set).
func (d *Decision) Shed() (status int, shed bool) {
	if d.Allowed {
		return 0, false
	}
	for _, a := range d.Applied[:d.enforced] {
		switch {
		case a.Shed && !shed:
			status, shed = a.Rule.Priority.ShedStatus(), true
		case a.Outcome == Denied:
			return 0, false // denied by a limit of its own too
		}
	}
	return status, shed
}

// Violated returns the names of the limits that denied the request.
func (d *Decision) Violated() []string {
	var names []string
	for _, a := range d.Applied[:d.enforced] {
		for i, r := range a.Results {
			if !r.Allowed {
				names = append(names, a.Limits[i].Name)
			}
		}
	}
	return names
}

// Decide decides r under the rule of every group that matches it (see
// Rule.Group): the request is admitted only if all of them admit it, in
// one call of the Limiter, and a denied request spends nothing. Rules in
// shadow mode are decided after, each alone, only when the request is
// admitted. A request lacking the key of a rule not in shadow mode is
// refused without deciding anything (Decision.Missing).
//
// The error is the Limiter's: a store failure under sluice.ReturnErrors
// (logged), or the context's error when the client went away; or, before
// anything is decided, one wrapping ErrInvalidKey when a header or query
// key is not valid UTF-8.
func (e *Engine) Decide(r *http.Request) (*Decision, error) {
	set := e.set.Load()
	var buf [4]*Rule
	rules := set.match(r, buf[:0])
	d := &Decision{Allowed: true, binding: -1}
	if len(rules) == 0 {
		return d, nil
	}
	d.Applied = make([]Applied, 0, len(rules))
	for _, rule := range rules {
		key, stored, ok, err := set.httpKey(r, rule)
		if err != nil && !rule.Shadow {
			return nil, err
		}
		if !ok {
			if rule.Shadow {
				continue // a shadow rule never refuses
			}
			d.Allowed, d.Missing, d.Applied = false, rule, nil
			return d, nil
		}
		a := Applied{Rule: rule, Key: key, stored: stored, Limits: rule.LimitsFor(key), Cost: rule.Cost, spend: rule.Cost}
		if rule.priority != nil {
			a.classify(set.classOf(rule, r))
		}
		d.Applied = append(d.Applied, a)
	}
	return d, e.decide(r.Context(), d)
}

// A Check asks for a decision under a rule named by a caller that knows
// the client already: the decision service's /v1/check, Envoy's
// descriptors.
type Check struct {
	// Rule is the rule's name.
	Rule string
	// Key is the client key as the rule's key source would yield it: an
	// IP address for a KeyIP rule (an IPv6 address is grouped by its
	// prefix, as requests are), the header or query value for the header
	// and query rules, any non-empty text for a KeyRequest rule; ignored
	// for KeyGlobal. It selects the plan.
	Key string
	// Composite says that Key joins several identifiers (an Envoy
	// descriptor's entries): it is stored in a namespace of its own, so
	// that no single header or query value can share its count. A rule
	// keyed by ip refuses it.
	Composite bool
	// Cost overrides the rule's cost when not nil; 0 reports the state
	// without spending anything, and is told to no Observer (it decides
	// nothing; what the next request would get is Inspect's to tell).
	Cost *int
	// Class is the request's priority class under a rule that sheds by
	// class (Rule.Priority): one of its classes, or any other value
	// (none, too) for the lowest.
	Class string
}

// UnknownRuleError is the error of a Check naming no rule.
type UnknownRuleError struct {
	// Rule is the name asked for.
	Rule string
	// Known are the names of the rules, sorted.
	Known []string
}

// maxListedRules is the most rule names an unknown-rule message lists.
const maxListedRules = 20

// Error says which rules there are.
func (e *UnknownRuleError) Error() string {
	switch {
	case len(e.Known) == 0:
		return fmt.Sprintf("unknown rule %q; no rules are configured", e.Rule)
	case len(e.Known) <= maxListedRules:
		return fmt.Sprintf("unknown rule %q; known rules: %s", e.Rule, strings.Join(e.Known, ", "))
	}
	return fmt.Sprintf("unknown rule %q (%d rules are configured)", e.Rule, len(e.Known))
}

// Check decides one request limited under every rule that checks name:
// admitted only if all of them admit it, in one call of the Limiter, and
// a denied request spends nothing, as in Decide. The error is an
// *UnknownRuleError, one wrapping ErrInvalidKey, ErrDuplicateCheck or
// sluice.ErrInvalidCost (a cost a limit of a rule not in shadow mode
// could never admit; every check is resolved first, so the other errors
// come before it) for a check that can never be decided, or the Limiter's
// error. Errors of the first kinds name the check by its index when there
// are several. A rule in shadow mode given a cost it could never admit
// reports its state and ShadowDenied, spending nothing.
func (e *Engine) Check(ctx context.Context, checks ...Check) (*Decision, error) {
	applied, err := e.set.Load().resolve(checks)
	if err != nil {
		return nil, err
	}
	d := &Decision{Allowed: true, binding: -1, Applied: applied}
	var costErr error
	for i := range d.Applied {
		a := &d.Applied[i]
		if err := a.costError(); err != nil {
			if !a.Rule.Shadow {
				costErr = cmp.Or(costErr, nameCheck(len(checks), i, err))
			}
			// A rule in shadow mode never refuses, not even a cost it
			// could never admit: it reports its state, and would deny.
			a.spend, a.impossible = 0, true
		}
	}
	if costErr != nil {
		return nil, costErr
	}
	return d, e.decide(ctx, d)
}

// resolve resolves every check, each Applied's Check its index, or
// returns the first error: an *UnknownRuleError, or one wrapping
// ErrInvalidKey or ErrDuplicateCheck. Every check is resolved before a
// caller refuses a cost, so that a check that names no rule is reported
// as such whatever its neighbours cost.
func (s *RuleSet) resolve(checks []Check) ([]Applied, error) {
	type seen struct{ rule, key string }
	var dup map[seen]int // only a decision of several checks can repeat one
	if len(checks) > 1 {
		dup = make(map[seen]int, len(checks))
	}
	applied := make([]Applied, 0, len(checks))
	for i, c := range checks {
		a, err := s.check(c)
		if err != nil {
			return nil, nameCheck(len(checks), i, err)
		}
		if dup != nil {
			if j, ok := dup[seen{a.Rule.Name, a.stored}]; ok {
				return nil, nameCheck(len(checks), i, fmt.Errorf("%w: repeats checks[%d] (rule %q, key %q); list each rule once per key", ErrDuplicateCheck, j, a.Rule.Name, c.Key))
			}
			dup[seen{a.Rule.Name, a.stored}] = i
		}
		a.Check = i
		applied = append(applied, a)
	}
	return applied, nil
}

// nameCheck names check i in err when there are n > 1 checks.
func nameCheck(n, i int, err error) error {
	if n > 1 {
		return fmt.Errorf("checks[%d]: %w", i, err)
	}
	return err
}

// check resolves c.
func (s *RuleSet) check(c Check) (Applied, error) {
	rule := s.byName[c.Rule]
	if rule == nil {
		known := make([]string, 0, len(s.rules))
		for _, r := range s.rules {
			known = append(known, r.Name)
		}
		slices.Sort(known)
		return Applied{}, &UnknownRuleError{Rule: c.Rule, Known: known}
	}
	key, stored, err := s.checkKey(rule, c.Key, c.Composite)
	if err != nil {
		return Applied{}, err
	}
	a := Applied{Rule: rule, Key: key, stored: stored, Limits: rule.LimitsFor(key), Cost: rule.Cost}
	if rule.priority != nil {
		a.classify(rule.Priority.index(c.Class))
	}
	if c.Cost != nil {
		a.Cost = *c.Cost
	}
	a.spend = a.Cost
	return a, nil
}

// costError reports a cost that one of a's limits could never admit,
// as its class may use them.
func (a *Applied) costError() error {
	for i, l := range a.Limits {
		if err := l.ValidateCost(a.Cost); err != nil {
			if a.Class != "" && a.Rule.Limits[i].ValidateCost(a.Cost) == nil {
				return fmt.Errorf("rule %q: %w: cost %d is more than class %q may use of limit %s (%d of %d); a higher class may send it", a.Rule.Name, sluice.ErrInvalidCost, a.Cost, a.Class, l.Name, l.Capacity(), a.Rule.Limits[i].Capacity())
			}
			return fmt.Errorf("rule %q: %w", a.Rule.Name, err)
		}
	}
	return nil
}

// decide decides d.Applied: the rules not in shadow mode together, then,
// if they admit the request, each rule in shadow mode alone.
func (e *Engine) decide(ctx context.Context, d *Decision) error {
	d.settled, d.slots = e.settled, e.slots
	slices.SortStableFunc(d.Applied, func(a, b Applied) int {
		switch {
		case a.Rule.Shadow == b.Rule.Shadow:
			return 0
		case b.Rule.Shadow:
			return -1
		}
		return 1
	})
	for d.enforced < len(d.Applied) && !d.Applied[d.enforced].Rule.Shadow {
		d.enforced++
	}
	if d.enforced > 0 {
		parts := make([]sluice.Part, d.enforced)
		for i, a := range d.Applied[:d.enforced] {
			parts[i] = sluice.Part{Key: a.stored, Limits: a.Limits, Cost: a.spend, OnError: a.Rule.OnError}
		}
		res, r, err := e.allow(ctx, d.Applied[:d.enforced], parts)
		if err != nil {
			e.failed(ctx, d.Applied[:d.enforced], err)
			return err
		}
		if !res.Allowed && retryHinted(d.Applied[:d.enforced], res.Results) {
			degraded := res.Degraded
			res = sluice.Combine(res.Results) // the binding limit may change
			res.Degraded = degraded
		}
		d.Allowed, d.Degraded, d.binding = res.Allowed, res.Degraded, res.Binding
		off := 0
		for i := range d.Applied[:d.enforced] {
			a := &d.Applied[i]
			a.reserved, a.part = r, i
			a.Results = res.Results[off : off+len(a.Limits) : off+len(a.Limits)]
			off += len(a.Limits)
			own := sluice.Combine(a.Results)
			a.Binding = own.Binding
			a.Outcome = outcome(res.Allowed, own.Allowed, res.Degraded)
			if a.Outcome == Denied && a.shed() {
				a.Shed, a.Outcome = true, Shed
			}
			e.report(a)
		}
	}
	if !d.Allowed {
		d.Applied = d.Applied[:d.enforced] // the request goes no further
		return nil
	}
	kept := d.enforced
	for i := d.enforced; i < len(d.Applied); i++ {
		a := &d.Applied[i]
		res, r, err := e.allow(ctx, d.Applied[i:i+1], []sluice.Part{{Key: a.stored, Limits: a.Limits, Cost: a.spend, OnError: a.Rule.OnError}})
		a.reserved = r
		if err != nil {
			// A shadow rule never blocks, nor fails a request: one the
			// store could not decide is left out, as one a denied
			// request never reached.
			e.failed(ctx, d.Applied[i:i+1], err)
			continue
		}
		if a.impossible {
			// Its state, and a denial: the cost is more than it admits.
			for j, l := range a.Limits {
				if l.ValidateCost(a.Cost) != nil {
					res.Results[j].Allowed = false
				}
			}
			res = sluice.Combine(res.Results)
		}
		a.Results, a.Binding = res.Results, res.Binding
		a.Outcome = OutcomeOf(res, true)
		e.report(a)
		d.Applied[kept] = *a
		kept++
	}
	d.Applied = d.Applied[:kept]
	return nil
}

// retryHinted caps the RetryAfter of the denials of rs (the Results of
// as, in order) by Concurrency limits at their rule's RetryAfter, and
// reports whether it changed any.
func retryHinted(as []Applied, rs []sluice.Result) bool {
	changed, off := false, 0
	for _, a := range as {
		if hint := a.Rule.RetryAfter; hint > 0 {
			for j, l := range a.Limits {
				if r := &rs[off+j]; l.Algorithm == sluice.Concurrency && !r.Allowed && r.RetryAfter > hint {
					r.RetryAfter, changed = hint, true
				}
			}
		}
		off += len(a.Limits)
	}
	return changed
}

// allow decides parts, those of as: reserved (sluice.Limiter.ReserveParts)
// when a rule of as settles and the request spends something, otherwise
// with AllowParts.
func (e *Engine) allow(ctx context.Context, as []Applied, parts []sluice.Part) (sluice.MultiResult, *sluice.Reservation, error) {
	if !reserving(as) {
		res, err := e.lim.AllowParts(ctx, parts...)
		return res, nil, err
	}
	r, err := e.lim.ReserveParts(ctx, parts...)
	if err != nil {
		return sluice.MultiResult{}, nil, err
	}
	return r.MultiResult, r, nil
}

// report tells the observer of a's outcome, unless a is a look (cost 0),
// and logs a's denial if the sampler picks it.
func (e *Engine) report(a *Applied) {
	if a.Cost == 0 {
		return // a look decided nothing
	}
	if a.Outcome == Denied || a.Outcome == ShadowDenied || a.Outcome == Shed {
		e.logDenial(a)
	}
	e.obs(a.Rule.Name, a.Key, a.Outcome)
	if a.Shed && e.shed != nil {
		e.shed(a.Rule.Name, a.Class)
	}
}

// OutcomeOf returns the outcome of a rule decided alone, res, in shadow
// mode or not.
func OutcomeOf(res sluice.MultiResult, shadow bool) Outcome {
	o := outcome(res.Allowed, res.Allowed, res.Degraded)
	if o == Denied && shadow {
		return ShadowDenied
	}
	return o
}

// outcome is a rule's outcome when the request was admitted or not, the
// rule's own limits admitted it or not, and the store failed or not.
func outcome(allowed, own bool, degraded sluice.Degradation) Outcome {
	switch {
	case degraded != sluice.NotDegraded && allowed:
		return DegradedAllowed
	case degraded != sluice.NotDegraded:
		return DegradedDenied
	case allowed:
		return Allowed
	case own:
		return DeniedByOther
	}
	return Denied
}

// failed logs a decision the Limiter could not make, unless the caller
// went away.
func (e *Engine) failed(ctx context.Context, as []Applied, err error) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return
	}
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.Rule.Name
	}
	e.log.Error("sluice: rate limit not decided", "rules", strings.Join(names, ","), "err", err)
}
