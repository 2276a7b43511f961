package envoy

import (
	"context"
	"errors"
	"math"
	"sync/atomic"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
)

// RuleEntry is the descriptor entry key that names a sluice rule.
const RuleEntry = "rule"

// RulesService answers Envoy's ShouldRateLimit from a sluice policy file
// rather than an envoyproxy/ratelimit one. Each descriptor names its rule
// in an entry whose key is "rule" (Envoy's generic_key action with
// descriptor_key: rule); its other entries, in order, identify the client
// (remote_address, a header value...). The rule's limits, plans and cost
// apply as in the middleware, a plan only when one entry identifies the
// client (its value is the client key a plan matches). hits_addend, when
// set, is the cost; a cost above what one of the limits can ever admit is
// OVER_LIMIT without consuming anything (as in Service). The domain is
// required but not interpreted. Each descriptor is one atomic decision; a
// rule in shadow mode always answers OK.
//
// In Envoy's route configuration:
//
//	rate_limits:
//	  - actions:
//	      - generic_key: {descriptor_key: rule, descriptor_value: login}
//	      - remote_address: {}
type RulesService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim   *sluice.Limiter
	rules atomic.Pointer[ruleSet]
	obs   func(rule string, res sluice.MultiResult, shadow bool)
}

// RulesOption configures a RulesService.
type RulesOption func(*RulesService)

// WithRulesObserver registers f to be told of every decision (the rule's
// name, its result, whether the rule is in shadow mode), for metrics.
// Unlike Service's observer, which labels each decision by its limit,
// this one labels it by the rule, whichever of its limits or plans bound.
func WithRulesObserver(f func(rule string, res sluice.MultiResult, shadow bool)) RulesOption {
	return func(s *RulesService) { s.obs = f }
}

// NewRulesService returns a service deciding with lim under f's rules. A
// nil f means no rules: every descriptor is InvalidArgument (unknown rule)
// until Update supplies some.
func NewRulesService(lim *sluice.Limiter, f *config.File, opts ...RulesOption) *RulesService {
	s := &RulesService{lim: lim, obs: func(string, sluice.MultiResult, bool) {}}
	for _, o := range opts {
		o(s)
	}
	s.Update(f)
	return s
}

// Update swaps the rules atomically (hot reload): a request being decided
// completes under the rules it started with. A nil f removes every rule.
// f should be a validated config.File (from config.Load or config.Parse);
// the service keeps its own copy of the rules, with their limits named as
// httplimit.New names them (config.Rule.WithLimitNames).
func (s *RulesService) Update(f *config.File) {
	var rules []config.Rule
	if f != nil {
		for _, r := range f.Rules {
			rules = append(rules, r.WithLimitNames())
		}
	}
	rs := &ruleSet{byName: make(map[string]*config.Rule, len(rules)), described: map[sluice.Limit]described{}}
	for i := range rules {
		r := &rules[i]
		rs.byName[r.Name] = r
		for _, l := range r.Limits {
			rs.described[l] = describe(l)
		}
		for _, p := range r.Plans {
			for _, l := range p.Limits {
				rs.described[l] = describe(l)
			}
		}
	}
	s.rules.Store(rs)
}

// ruleSet is the rules a RulesService decides under, with what
// current_limit says of each of their limits, computed once per Update.
type ruleSet struct {
	byName    map[string]*config.Rule
	described map[sluice.Limit]described
}

// described is what current_limit says of a sluice limit besides its
// number of requests.
type described struct {
	name string
	unit rlsv3.RateLimitResponse_RateLimit_Unit
}

// describe names l by its name and parameters, and gives its period's unit
// when the period is exactly one unit, else UNKNOWN.
func describe(l sluice.Limit) described {
	u, _ := unitOfPeriod(l.Period)
	return described{name: l.Name + " (" + l.Named("").String() + ")", unit: u.current}
}

// currentLimit reports l to Envoy: its capacity per period.
func (rs *ruleSet) currentLimit(l sluice.Limit) *rlsv3.RateLimitResponse_RateLimit {
	d, ok := rs.described[l]
	if !ok {
		d = describe(l)
	}
	return &rlsv3.RateLimitResponse_RateLimit{
		Name:            d.name,
		RequestsPerUnit: uint32(min(int64(l.Limit), math.MaxUint32)),
		Unit:            d.unit,
	}
}

// ShouldRateLimit implements Envoy's rate limit service.
func (s *RulesService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "domain is empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no descriptors")
	}
	rules := s.rules.Load()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for i, d := range req.GetDescriptors() {
		st, err := s.decide(ctx, rules, req, d)
		if err != nil {
			return nil, status.Errorf(status.Code(err), "descriptors[%d]: %s", i, status.Convert(err).Message())
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

func (s *RulesService) decide(ctx context.Context, rules *ruleSet, req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	var rule *config.Rule
	var client []Entry
	for _, e := range d.GetEntries() {
		if e.GetKey() == RuleEntry && rule == nil {
			r, ok := rules.byName[e.GetValue()]
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "unknown rule %q", e.GetValue())
			}
			rule = r
			continue
		}
		client = append(client, Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	if rule == nil {
		return nil, status.Errorf(codes.InvalidArgument, "no %q entry names a rule", RuleEntry)
	}
	// Plans match the client's value when one entry identifies it.
	limits := rule.Limits
	if len(client) == 1 {
		limits = rule.LimitsFor(client[0].Value)
	}
	cost := rule.Cost
	if n := req.GetHitsAddend(); n > 0 {
		cost = int(min(n, math.MaxInt32))
	}
	if n := d.GetHitsAddend(); n != nil && n.GetValue() > 0 {
		cost = int(min(n.GetValue(), math.MaxInt32))
	}
	n := cost
	for _, l := range limits {
		if cost > l.Capacity() {
			n = 0 // could never be admitted: report the state, over the limit
			break
		}
	}
	res, err := s.lim.AllowAll(ctx, storageKey("rule:"+rule.Name, client), n, limits...)
	if err != nil {
		if errors.Is(err, sluice.ErrInvalidCost) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, storeError(err)
	}
	if n != cost {
		for i, l := range limits {
			if cost > l.Capacity() {
				res.Results[i].Allowed = false
			}
		}
		res = sluice.Combine(res.Results) // binding: a limit the cost exceeds
	}
	s.obs(rule.Name, res, rule.Shadow)
	bound := limits[res.Binding]
	st := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               rlsv3.RateLimitResponse_OK,
		CurrentLimit:       rules.currentLimit(bound),
		LimitRemaining:     uint32(min(max(int64(res.Remaining), 0), math.MaxUint32)),
		DurationUntilReset: durationpb.New(res.ResetAfter),
	}
	if !res.Allowed && !rule.Shadow {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return st, nil
}
