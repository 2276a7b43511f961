package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/policy"
)

// MaxDescriptors is the most descriptors one ShouldRateLimit request may
// hold, for Service and RulesService alike; a request with more is
// InvalidArgument, refused before any is matched or decided. Envoy sends
// one descriptor per matching rate_limits action list of a route, a few in
// practice; without a cap one request of 10,000 descriptors ran 10,000
// store calls.
const MaxDescriptors = 64

// checkDescriptors refuses a request of n descriptors that holds none or
// more than MaxDescriptors.
func checkDescriptors(n int) error {
	switch {
	case n == 0:
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case n > MaxDescriptors:
		return status.Errorf(codes.InvalidArgument, "the request holds %d descriptors; at most %d are allowed", n, MaxDescriptors)
	}
	return nil
}

// Service implements Envoy's rate limit service (envoy.service.ratelimit.v3)
// over a sluice.Limiter, answering as envoyproxy/ratelimit does under the
// same configuration (see the package documentation for where it
// differs). It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim     *sluice.Limiter
	cfg     atomic.Pointer[generation]
	headers HeaderMode
	names   [3]string // HeadersRateLimit's field names: limit, remaining, reset
	now     func() time.Time
	obs     policy.Observer
	unknown func(domain string)
	log     *slog.Logger
}

// generation is a configuration and the unknown domains logged under it.
type generation struct {
	cfg    *Config
	mu     sync.Mutex
	logged map[string]bool
}

// maxLoggedDomains bounds the unknown domains a generation logs by name.
const maxLoggedDomains = 100

// ServiceOption configures a Service.
type ServiceOption func(*Service)

// WithObserver registers f to be told of every counted decision: a label
// for the limit, the descriptor's storage key as the client key, and its
// outcome, shadow mode included (for metrics and the dashboard). The label
// is the limit's name for a configured descriptor
// ("<domain>.<key>[_<value>]...", per node of the configuration, never per
// request value) and "override.<domain>" for every limit override a
// request carries, so that the labels are as few as the configuration's
// nodes. (A RulesService's engine observes by rule name instead.)
func WithObserver(f policy.Observer) ServiceOption {
	return func(s *Service) { s.obs = f }
}

// WithUnknownDomain registers f to be told of every request for a domain
// the configuration does not have (for metrics). Such a request is
// answered OK, as envoyproxy/ratelimit answers it.
func WithUnknownDomain(f func(domain string)) ServiceOption {
	return func(s *Service) { s.unknown = f }
}

// WithLogger sets where a Service logs a request for an unknown domain:
// once per domain (for the first 100 domains) until the next Update.
// The default is slog.Default().
func WithLogger(l *slog.Logger) ServiceOption { return func(s *Service) { s.log = l } }

// HeaderMode chooses the header fields a Service asks Envoy to add to the
// response (response_headers_to_add).
type HeaderMode int

// The header modes, named by ParseHeaderMode's names.
const (
	// HeadersNone adds none, as envoyproxy/ratelimit by default.
	HeadersNone HeaderMode = iota
	// HeadersRateLimit adds RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (seconds) of the most restrictive descriptor, as
	// envoyproxy/ratelimit with LIMIT_RESPONSE_HEADERS_ENABLED=true: the
	// last one over the limit, else the one with the least remaining.
	// WithHeaderNames renames them, as its LIMIT_*_HEADER settings do.
	HeadersRateLimit
	// HeadersIETF adds the IETF draft's RateLimit-Policy and RateLimit,
	// as package httplimit writes them: one distinctly named item per
	// counted descriptor.
	HeadersIETF
)

var headerModeNames = [...]string{"none", "ratelimit", "ietf"}

// HeaderModes lists the names ParseHeaderMode accepts, for help texts.
var HeaderModes = headerModeNames[0] + ", " + headerModeNames[1] + " or " + headerModeNames[2]

// ParseHeaderMode returns the HeaderMode named s: "none", "ratelimit" or
// "ietf".
func ParseHeaderMode(s string) (HeaderMode, error) {
	for i, name := range headerModeNames {
		if s == name {
			return HeaderMode(i), nil
		}
	}
	return 0, fmt.Errorf("envoy: header mode %q is not one of %s", s, HeaderModes)
}

// String returns the mode's name as ParseHeaderMode accepts it.
func (m HeaderMode) String() string {
	if m < 0 || int(m) >= len(headerModeNames) {
		return "HeaderMode(" + strconv.Itoa(int(m)) + ")"
	}
	return headerModeNames[m]
}

// WithHeaders makes the Service add the header fields of mode to every
// response with a limited descriptor.
func WithHeaders(mode HeaderMode) ServiceOption { return func(s *Service) { s.headers = mode } }

// DefaultHeaderNames are HeadersRateLimit's field names, as
// envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER default to them.
var DefaultHeaderNames = [3]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}

// WithHeaderNames renames HeadersRateLimit's fields; an empty name keeps
// the default.
func WithHeaderNames(limit, remaining, reset string) ServiceOption {
	return func(s *Service) {
		for i, n := range []string{limit, remaining, reset} {
			if n != "" {
				s.names[i] = n
			}
		}
	}
}

// NewService returns a Service deciding with lim under cfg.
func NewService(lim *sluice.Limiter, cfg *Config, opts ...ServiceOption) *Service {
	s := &Service{lim: lim, now: time.Now, obs: func(string, string, policy.Outcome) {}, unknown: func(string) {}, log: slog.Default(), names: DefaultHeaderNames}
	s.Update(cfg)
	for _, o := range opts {
		o(s)
	}
	return s
}

// Update replaces the configuration atomically; requests in flight finish
// under the one they started with.
func (s *Service) Update(cfg *Config) { s.cfg.Store(&generation{cfg: cfg}) }

// Config returns the configuration the service decides under now.
func (s *Service) Config() *Config { return s.cfg.Load().cfg }

// Register registers s on g.
func Register(g *grpc.Server, s rlsv3.RateLimitServiceServer) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

// ShouldRateLimit decides every descriptor of req, each on its own.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if err := checkDescriptors(len(req.GetDescriptors())); err != nil {
		return nil, err
	}
	gen := s.cfg.Load()
	var dom *Domain
	if gen.cfg != nil {
		dom = gen.cfg.Domains[req.GetDomain()]
	}
	var resp *rlsv3.RateLimitResponse
	if len(req.GetDescriptors()) == 1 {
		// The usual request: the response and its one status's slot in
		// one allocation.
		r1 := &response1{}
		r1.resp.Statuses = r1.statuses[:]
		resp = &r1.resp
	} else {
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))}
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if dom == nil {
		// As in envoyproxy/ratelimit: nothing limits an unknown domain,
		// so that Envoy ahead of its rate limit configuration (or asking
		// for another team's domain) is not refused under
		// failure_mode_deny.
		s.unknownDomain(gen, req.GetDomain())
		for i := range resp.Statuses {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		}
		return resp, nil
	}
	// Each descriptor is matched once, before any is decided: a matched
	// limit that names others in replaces turns them off for this request,
	// as in envoyproxy/ratelimit, and an invalid override fails the
	// request before anything is counted.
	var one [1]match // the usual request of one descriptor needs no slice of its own
	ms := one[:]
	if len(req.GetDescriptors()) > 1 {
		ms = make([]match, len(req.GetDescriptors()))
	}
	var first [4]Entry // the first descriptor's entries, when there are few
	for i, d := range req.GetDescriptors() {
		var entries []Entry
		if i == 0 && len(d.GetEntries()) <= len(first) {
			entries = entriesInto(first[:0], d)
		} else {
			entries = entriesInto(nil, d)
		}
		if o := d.GetLimit(); o != nil {
			var err error
			if ms[i].override, ms[i].limit, err = override(req.GetDomain(), o, entries); err != nil {
				return nil, err
			}
			ms[i].store = storageKey(req.GetDomain(), entries)
			continue
		}
		var key []Entry
		if ms[i].node, key = dom.resolve(entries); ms[i].node != nil && !ms[i].node.RateLimit.Unlimited {
			ms[i].limit, ms[i].store = ms[i].node.RateLimit.Limit, storageKey(req.GetDomain(), key)
		}
	}
	var replaced map[string]bool
	if dom.replaces {
		replaced = map[string]bool{}
		for _, m := range ms {
			if m.node != nil {
				for _, name := range m.node.RateLimit.Replaces {
					replaced[name] = true
				}
			}
		}
	}
	var (
		limits  []sluice.Limit // for HeadersIETF
		results []sluice.Result
		// For HeadersRateLimit, as envoyproxy/ratelimit picks it: the
		// last descriptor over the limit, else the first with the least
		// remaining.
		tightest     *rlsv3.RateLimitResponse_DescriptorStatus
		minRemaining uint32 = math.MaxUint32
	)
	var (
		vs  []verdict
		err error
	)
	if len(ms) == 1 {
		var one [1]verdict // as ms: no slice of its own
		one[0], err = s.decide(ctx, req, req.GetDescriptors()[0], ms[0], replaced)
		vs = one[:]
	} else {
		vs, err = s.decideAll(ctx, req, ms, replaced)
	}
	if err != nil {
		return nil, err
	}
	for i, v := range vs {
		st := v.status
		if st.CurrentLimit != nil && st.LimitRemaining < minRemaining {
			tightest, minRemaining = st, st.LimitRemaining
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			if v.quota {
				// Reported, not enforced: OK with the limit and what is
				// left of it, as envoyproxy/ratelimit's quota_mode.
				st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: st.CurrentLimit, LimitRemaining: st.LimitRemaining}
			} else {
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
				if st.CurrentLimit != nil {
					tightest, minRemaining = st, 0
				}
			}
		}
		resp.Statuses[i] = st
		if v.counted && s.headers == HeadersIETF {
			limits = append(limits, v.limit)
			results = append(results, v.result)
		}
	}
	switch {
	case s.headers == HeadersRateLimit && tightest != nil:
		c := tightest.CurrentLimit
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: s.names[0], Value: strconv.FormatUint(uint64(c.RequestsPerUnit), 10)},
			{Key: s.names[1], Value: strconv.FormatUint(uint64(tightest.LimitRemaining), 10)},
			{Key: s.names[2], Value: strconv.FormatInt(tightest.GetDurationUntilReset().GetSeconds(), 10)},
		}
	case s.headers == HeadersIETF && len(limits) > 0:
		h := http.Header{}
		httplimit.SetHeaders(h, httplimit.HeadersIETF, limits, results, -1, s.now(), nil)
		for _, k := range []string{"RateLimit-Policy", "RateLimit"} {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: h.Get(k)})
		}
	}
	return resp, nil
}

// decideAll returns the verdict on every descriptor of req. Descriptors
// with counts of their own are independent, so they are decided at once:
// a request of three waits for the slowest store call, not for three in
// a row (on Redis, they go out in one pipelined write).
func (s *Service) decideAll(ctx context.Context, req *rlsv3.RateLimitRequest, ms []match, replaced map[string]bool) ([]verdict, error) {
	ds := req.GetDescriptors()
	vs := make([]verdict, len(ds))
	if sharesCount(ms) {
		// In request order, as envoyproxy/ratelimit decides them: the
		// first of two descriptors that share a count is the one it
		// admits.
		for i, d := range ds {
			var err error
			if vs[i], err = s.decide(ctx, req, d, ms[i], replaced); err != nil {
				return nil, err
			}
		}
		return vs, nil
	}
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds[1:] {
		m := ms[i+1] // a copy: ms itself stays on the caller's stack
		wg.Go(func() { vs[i+1], errs[i+1] = s.decide(ctx, req, d, m, replaced) })
	}
	vs[0], errs[0] = s.decide(ctx, req, ds[0], ms[0], replaced) // meanwhile, here
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return vs, nil
}

// sharesCount reports whether two of the matched descriptors ms may
// spend one count: the same limit under the same
// store key (the same entries twice, two values of one share_threshold
// wildcard).
func sharesCount(ms []match) bool {
	type count struct{ limit, store string }
	seen := make(map[count]bool, len(ms))
	for _, m := range ms {
		if m.store == "" {
			continue // nothing counted
		}
		k := count{m.limit.Name, m.store}
		if seen[k] {
			return true
		}
		seen[k] = true
	}
	return false
}

// unknownDomain reports a request for a domain gen does not have, and
// logs the domain the first time gen sees it.
func (s *Service) unknownDomain(gen *generation, domain string) {
	s.unknown(domain)
	gen.mu.Lock()
	first := !gen.logged[domain] && len(gen.logged) < maxLoggedDomains
	if first {
		if gen.logged == nil {
			gen.logged = map[string]bool{}
		}
		gen.logged[domain] = true
	}
	gen.mu.Unlock()
	if first {
		s.log.Warn("request for a domain the rate limit configuration does not have; answered OK", "domain", domain)
	}
}

// match is what a request descriptor's entries match: the configured
// node (nil for none, and for a limit override) or the limit override
// it carries, the limit, and the store key its count is kept under (of
// the entries, a share_threshold entry's value replaced by its pattern;
// "" when nothing matched).
type match struct {
	node     *Descriptor
	override *RateLimit
	limit    sluice.Limit
	store    string
}

// override returns the limit override o of a descriptor with entries: a
// fixed window of its numbers, or InvalidArgument.
func override(domain string, o *commonv3.RateLimitDescriptor_RateLimitOverride, entries []Entry) (*RateLimit, sluice.Limit, error) {
	u, good := unitOfOverride(o.GetUnit())
	if !good {
		return nil, sluice.Limit{}, status.Errorf(codes.InvalidArgument, "limit override unit %s is not supported", o.GetUnit())
	}
	period, err := u.times(o.GetUnitMultiplier().GetValue())
	if err != nil {
		return nil, sluice.Limit{}, status.Errorf(codes.InvalidArgument, "limit override: %v", err)
	}
	rl := &RateLimit{Unit: u.name, RequestsPerUnit: o.GetRequestsPerUnit(), UnitMultiplier: o.GetUnitMultiplier().GetValue(), current: u.current}
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Limit: int(o.GetRequestsPerUnit()), Period: period, Name: limitName("override." + domain + "." + entryPath(entries))}
	if o.GetRequestsPerUnit() > 0 {
		if err := lim.Validate(); err != nil {
			return nil, sluice.Limit{}, status.Errorf(codes.InvalidArgument, "limit override: %v", err)
		}
	}
	return rl, lim, nil
}

// verdict is one descriptor's answer: its status before quota mode
// turns it OK, whether the node is in quota mode, and, when a limit
// counted the request and its numbers are real (counted), the limit and
// its result.
type verdict struct {
	status  *rlsv3.RateLimitResponse_DescriptorStatus
	quota   bool
	counted bool
	limit   sluice.Limit
	result  sluice.Result
}

// statusOf is a counted descriptor's status with its current_limit and
// duration_until_reset, made in one allocation instead of three.
type statusOf struct {
	status  rlsv3.RateLimitResponse_DescriptorStatus
	current rlsv3.RateLimitResponse_RateLimit
	reset   durationpb.Duration
}

// okStatus returns a status OK with nothing else.
func okStatus() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
}

// decide returns the verdict on descriptor d, matched as m.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor, m match, replaced map[string]bool) (verdict, error) {
	var (
		lim    = m.limit
		rl     *RateLimit
		shadow bool
		quota  bool
		label  string // for the observer: bounded, unlike an override's name
	)
	if m.override != nil {
		rl, label = m.override, limitName("override."+req.GetDomain())
	} else {
		if m.node == nil {
			return verdict{status: okStatus()}, nil
		}
		rl, shadow = m.node.RateLimit, m.node.ShadowMode
		if rl.Unlimited {
			// Before replaces, as in envoyproxy/ratelimit: an unlimited
			// limit is never replaced.
			st := okStatus()
			st.LimitRemaining = math.MaxUint32
			return verdict{status: st}, nil
		}
		if rl.Name != "" && replaced[rl.Name] {
			return verdict{status: okStatus()}, nil // replaced: neither decided nor counted
		}
		label, quota = lim.Name, m.node.QuotaMode
	}
	cost := costOf(req, d)
	box := &statusOf{}
	box.status.Code = rlsv3.RateLimitResponse_OK
	box.status.CurrentLimit = currentLimit(&box.current, rl)
	v := verdict{quota: quota, status: &box.status}
	var res sluice.Result
	if d.GetIsNegativeHits() {
		// A refund of what an earlier request of this descriptor was
		// charged (Envoy sends it once the response shows the work cost
		// less): never limited, and not a decision.
		return s.refund(ctx, v, box, lim, m.store, cost)
	}
	if lim.Limit == 0 {
		// requests_per_unit: 0 blocks every request; a check of cost 0
		// passes, with nothing remaining, as in envoyproxy/ratelimit. The
		// window it reports is the unit's current one (resetSeconds).
		res = sluice.Result{Allowed: cost == 0}
	} else {
		n := cost
		if cost > lim.Capacity() {
			n = 0 // could never be admitted: report the state, over the limit
		}
		var err error
		res, err = s.lim.AllowN(ctx, m.store, lim, n)
		if err != nil {
			return verdict{}, storeError(err)
		}
		if n != cost {
			res.Allowed = false
		}
		s.obs(label, m.store, policy.OutcomeOf(sluice.MultiResult{Result: res, Results: []sluice.Result{res}}, shadow))
	}
	if !res.Allowed && !shadow {
		v.status.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if res.Degraded.MadeUp() {
		// Only the code: from a current_limit Envoy would write
		// X-RateLimit headers with a remaining of 0.
		v.status.CurrentLimit = nil
		return v, nil
	}
	v.status.LimitRemaining = uint32(min(max(int64(res.Remaining), 0), math.MaxUint32))
	box.reset.Seconds = s.resetSeconds(lim, res)
	v.status.DurationUntilReset = &box.reset
	if lim.Limit > 0 {
		v.counted, v.limit, v.result = true, lim, res
	}
	return v, nil
}

// refund gives cost back to key under lim (is_negative_hits: a refund
// whose take is not known, sluice.Limiter.Refund) and answers OK with the
// state after it. A cost above the limit's capacity gives back a full
// one; a limit of 0 holds nothing to give back. A store that cannot give
// back (its Refund fails with errors.ErrUnsupported) is FailedPrecondition, a store failure
// Unavailable, as for a decision.
func (s *Service) refund(ctx context.Context, v verdict, box *statusOf, lim sluice.Limit, key string, cost int) (verdict, error) {
	if lim.Limit == 0 {
		return v, nil
	}
	n := min(cost, lim.Capacity())
	var (
		res sluice.Result
		err error
	)
	if n == 0 {
		res, err = s.lim.AllowN(ctx, key, lim, 0)
	} else {
		var mr sluice.MultiResult
		mr, err = s.lim.Refund(ctx, sluice.Part{Key: key, Limits: []sluice.Limit{lim}, Cost: n})
		res = mr.Result
	}
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return verdict{}, status.Errorf(codes.FailedPrecondition, "is_negative_hits: %v", err)
	case err != nil:
		return verdict{}, storeError(err)
	}
	v.status.LimitRemaining = uint32(min(max(int64(res.Remaining), 0), math.MaxUint32))
	box.reset.Seconds = s.resetSeconds(lim, res)
	v.status.DurationUntilReset = &box.reset
	return v, nil
}

// costOf returns what descriptor d of req spends, as envoyproxy/ratelimit
// counts it: the descriptor's own hits_addend when it is set, 0 included
// (a check that spends nothing), else the request's, where 0 means 1.
func costOf(req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor) int {
	if h := d.GetHitsAddend(); h != nil {
		return int(min(h.GetValue(), math.MaxInt32))
	}
	return int(min(max(uint64(req.GetHitsAddend()), 1), math.MaxInt32))
}

// resetSeconds is a result's duration_until_reset in whole seconds,
// rounded up, as envoyproxy/ratelimit reports it. A fixed window that
// nothing has counted in yet resets at the end of the current window.
func (s *Service) resetSeconds(l sluice.Limit, r sluice.Result) int64 {
	d := r.ResetAfter
	if d <= 0 && (l.Algorithm == sluice.FixedWindow || l.Limit == 0) && l.Period > 0 {
		d = l.Period - time.Duration(s.now().UnixNano()%int64(l.Period))
	}
	return int64((d + time.Second - 1) / time.Second)
}

// storeError maps an error of the Limiter to a gRPC status: Canceled when
// the caller gave up, else Unavailable, leaving the choice to Envoy's
// failure_mode_deny.
func storeError(err error) error {
	if errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Unavailable, "rate limit store: %v", err)
}

// currentLimit reports rl to Envoy in c, and returns c: named only when
// the file names it, as envoyproxy/ratelimit reports it.
func currentLimit(c *rlsv3.RateLimitResponse_RateLimit, rl *RateLimit) *rlsv3.RateLimitResponse_RateLimit {
	c.Name, c.RequestsPerUnit, c.Unit = rl.Name, rl.RequestsPerUnit, rl.current
	if rl.UnitMultiplier > 1 {
		c.UnitMultiplier = wrapperspb.UInt32(rl.UnitMultiplier)
	}
	return c
}

// storageKey builds the store key of a request descriptor: the domain and
// every entry, each length-prefixed so that no two distinct descriptors
// share a key whatever bytes their keys and values hold.
func storageKey(domain string, entries []Entry) string {
	var b strings.Builder
	n := len("envoy:") + len(domain) + 4
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 8
	}
	b.Grow(n) // one allocation: a length prefix of up to 3 digits per part
	b.WriteString("envoy:")
	put := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	put(domain)
	for _, e := range entries {
		put(e.Key)
		put(e.Value)
	}
	return b.String()
}

func entryPath(entries []Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.Key
		if e.Value != "" {
			parts[i] += "_" + e.Value
		}
	}
	return strings.Join(parts, ".")
}

// entriesInto appends the entries of a request descriptor to buf.
func entriesInto(buf []Entry, d *commonv3.RateLimitDescriptor) []Entry {
	buf = slices.Grow(buf, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		buf = append(buf, Entry{e.GetKey(), e.GetValue()})
	}
	return buf
}

// response1 is a response of one status, made in one allocation.
type response1 struct {
	resp     rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
}
