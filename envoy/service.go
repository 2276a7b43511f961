package envoy

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
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
// over a sluice.Limiter. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim     *sluice.Limiter
	cfg     atomic.Pointer[Config]
	headers bool
	now     func() time.Time
	obs     policy.Observer
}

// WithObserver registers f to be told of every counted decision: a label
// for the limit, its result, and whether the descriptor is in shadow mode
// (for metrics). The label is the limit's name for a configured descriptor
// ("<domain>.<key>[_<value>]...", per node of the configuration, never per
// request value) and "override.<domain>" for every limit override a
// request carries, so that the labels are as few as the configuration's
// nodes. (A RulesService's engine observes by rule name instead.)
func WithObserver(f policy.Observer) ServiceOption {
	return func(s *Service) { s.obs = f }
}

// ServiceOption configures a Service.
type ServiceOption func(*Service)

// WithResponseHeaders makes the Service ask Envoy to add the IETF draft's
// RateLimit-Policy and RateLimit fields (as package httplimit writes them)
// to the response, one list item per matched, limited descriptor.
func WithResponseHeaders() ServiceOption { return func(s *Service) { s.headers = true } }

// NewService returns a Service deciding with lim under cfg.
func NewService(lim *sluice.Limiter, cfg *Config, opts ...ServiceOption) *Service {
	s := &Service{lim: lim, now: time.Now, obs: func(string, policy.Outcome) {}}
	s.cfg.Store(cfg)
	for _, o := range opts {
		o(s)
	}
	return s
}

// Update replaces the configuration atomically; requests in flight finish
// under the one they started with.
func (s *Service) Update(cfg *Config) { s.cfg.Store(cfg) }

// Register registers s on g.
func Register(g *grpc.Server, s rlsv3.RateLimitServiceServer) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

// ShouldRateLimit decides every descriptor of req in order.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	cfg := s.cfg.Load()
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case cfg == nil || cfg.Domains[req.GetDomain()] == nil:
		return nil, status.Errorf(codes.InvalidArgument, "unknown rate limit domain %q", req.GetDomain())
	}
	if err := checkDescriptors(len(req.GetDescriptors())); err != nil {
		return nil, err
	}
	// Each descriptor is matched once, before any is decided: a matched
	// limit that names others in replaces turns them off for this request,
	// as in envoyproxy/ratelimit.
	ms := make([]match, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has no entries", i)
		}
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d entry %d has an empty key", i, j)
			}
		}
		ms[i].entries = entriesOf(d)
		if d.GetLimit() == nil {
			ms[i].node = cfg.Match(req.GetDomain(), ms[i].entries)
		}
	}
	var replaced map[string]bool
	if cfg.Domains[req.GetDomain()].replaces {
		replaced = map[string]bool{}
		for _, m := range ms {
			if m.node != nil {
				for _, name := range m.node.RateLimit.Replaces {
					replaced[name] = true
				}
			}
		}
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	var limits []sluice.Limit
	var results []sluice.Result
	for i, d := range req.GetDescriptors() {
		st, lim, res, err := s.decide(ctx, req, d, ms[i], replaced)
		if err != nil {
			return nil, err
		}
		resp.Statuses = append(resp.Statuses, st)
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if lim != nil {
			limits = append(limits, *lim)
			results = append(results, res)
		}
	}
	if s.headers && len(limits) > 0 {
		h := http.Header{}
		httplimit.SetHeaders(h, httplimit.HeadersIETF, limits, results, -1, s.now(), nil)
		for _, k := range []string{"RateLimit-Policy", "RateLimit"} {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: h.Get(k)})
		}
	}
	return resp, nil
}

// match is a request descriptor's entries and the configured node they
// match (nil for none, and for a limit override).
type match struct {
	entries []Entry
	node    *Descriptor
}

// decide returns the status of descriptor d, matched as m, and, when a
// counted limit applied, the limit and its result.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor, m match, replaced map[string]bool) (*rlsv3.RateLimitResponse_DescriptorStatus, *sluice.Limit, sluice.Result, error) {
	ok := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	entries := m.entries
	var (
		lim    sluice.Limit
		rl     *RateLimit
		shadow bool
		label  string // for the observer: bounded, unlike an override's name
	)
	if o := d.GetLimit(); o != nil {
		u, good := unitOfOverride(o.GetUnit())
		if !good {
			return nil, nil, sluice.Result{}, status.Errorf(codes.InvalidArgument, "limit override unit %s is not supported", o.GetUnit())
		}
		period := u.period
		if m := o.GetUnitMultiplier().GetValue(); m > 1 {
			period *= time.Duration(m)
		}
		rl = &RateLimit{Unit: u.name, RequestsPerUnit: o.GetRequestsPerUnit(), UnitMultiplier: o.GetUnitMultiplier().GetValue(), current: u.current}
		lim = sluice.Limit{Algorithm: sluice.FixedWindow, Limit: int(o.GetRequestsPerUnit()), Period: period, Name: limitName("override." + req.GetDomain() + "." + entryPath(entries))}
		label = limitName("override." + req.GetDomain())
		if o.GetRequestsPerUnit() > 0 {
			if err := lim.Validate(); err != nil {
				return nil, nil, sluice.Result{}, status.Errorf(codes.InvalidArgument, "limit override: %v", err)
			}
		}
	} else {
		if m.node == nil {
			return ok, nil, sluice.Result{}, nil
		}
		rl, shadow = m.node.RateLimit, m.node.ShadowMode
		if rl.Name != "" && replaced[rl.Name] {
			return ok, nil, sluice.Result{}, nil // replaced: neither decided nor counted
		}
		if rl.Unlimited {
			ok.LimitRemaining = math.MaxUint32
			return ok, nil, sluice.Result{}, nil
		}
		lim, label = rl.Limit, rl.Limit.Name
	}
	cost := int(req.GetHitsAddend())
	if h := d.GetHitsAddend().GetValue(); h > 0 {
		cost = int(min(h, math.MaxInt32))
	}
	if cost == 0 {
		cost = 1
	}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: currentLimit(rl, lim.Name)}
	var res sluice.Result
	if lim.Limit == 0 {
		// requests_per_unit: 0 blocks every request.
		res = sluice.Result{Limit: 0, ResetAfter: lim.Period, RetryAfter: lim.Period}
	} else {
		n := cost
		if cost > lim.Capacity() {
			n = 0 // could never be admitted: report the state, over the limit
		}
		var err error
		res, err = s.lim.AllowN(ctx, storageKey(req.GetDomain(), entries), lim, n)
		if err != nil {
			return nil, nil, res, storeError(err)
		}
		if n != cost {
			res.Allowed = false
		}
		s.obs(label, policy.OutcomeOf(sluice.MultiResult{Result: res, Results: []sluice.Result{res}}, shadow))
	}
	if !res.Allowed && !shadow {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if res.Degraded.MadeUp() {
		// Only the code: from a current_limit Envoy would write
		// X-RateLimit headers with a remaining of 0.
		st.CurrentLimit = nil
		return st, nil, res, nil
	}
	st.LimitRemaining = uint32(min(max(int64(res.Remaining), 0), math.MaxUint32))
	st.DurationUntilReset = durationpb.New(res.ResetAfter)
	return st, &lim, res, nil
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

// currentLimit reports rl to Envoy, named by its rate_limit name if it has
// one, else by the sluice Limit name.
func currentLimit(rl *RateLimit, name string) *rlsv3.RateLimitResponse_RateLimit {
	if rl.Name != "" {
		name = rl.Name
	}
	c := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.current}
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

// entriesOf returns the entries of a request descriptor.
func entriesOf(d *commonv3.RateLimitDescriptor) []Entry {
	entries := make([]Entry, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		entries[i] = Entry{e.GetKey(), e.GetValue()}
	}
	return entries
}
