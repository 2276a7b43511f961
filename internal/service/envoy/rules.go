package envoy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

// RuleEntry is the descriptor entry key that names a sluice rule.
const RuleEntry = "rule"

// ClassEntry is the descriptor entry key that names a request's priority
// class, under a rule that sheds by class (policy.Priority; Envoy's
// request_headers action with descriptor_key: class, say): it is no part
// of the client key, and a rule without a priority ignores it.
const ClassEntry = "class"

// RulesService answers Envoy's ShouldRateLimit from a sluice policy file
// rather than an envoyproxy/ratelimit one: a door that translates
// descriptors to checks of a policy.Engine and its Decision back.
//
// Each descriptor names its rule in an entry whose key is "rule" (Envoy's
// generic_key action with descriptor_key: rule); its other entry names
// the client as the rule's key source would: the address for a rule
// keyed by ip (Envoy's remote_address action), the header's value for a
// rule keyed by header:<Name> (request_headers), any value for a rule
// keyed by request; an entry whose key is "class" names the request's
// priority class under a rule that sheds by class (ClassEntry). Such a
// descriptor spends
// the same count as the middleware and POST /v1/check for that rule and
// client. A descriptor with several client entries is keyed by all of
// them ("<len>:key=<len>:value" pairs joined by ";"), a count of its own
// that no single header or query value, and no other descriptor, shares, which only a header, query or request rule
// can take; a global rule needs none. A key the
// rule's source could not yield is InvalidArgument.
//
// The descriptors of one request are one decision, as the rules a request
// matches in the middleware: the request is admitted only if every
// descriptor's rule admits it, and a denied request spends nothing.
// hits_addend, when set, is the cost of every descriptor; a descriptor's
// own hits_addend overrides it, and an explicit 0 reports the state
// without spending. A cost above what a limit can ever admit answers
// OVER_LIMIT without spending anything, each descriptor reporting its
// limit and what is left of it. The domain is required but not
// interpreted; a rule in shadow mode always answers OK, even with a cost
// it could never admit. See the package documentation.
//
// In Envoy's route configuration:
//
//	rate_limits:
//	  - actions:
//	      - generic_key: {descriptor_key: rule, descriptor_value: login}
//	      - remote_address: {}
type RulesService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	engine *policy.Engine
}

// NewRulesService returns a service deciding with e.
func NewRulesService(e *policy.Engine) *RulesService {
	return &RulesService{engine: e}
}

// ShouldRateLimit implements Envoy's rate limit service.
func (s *RulesService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "domain is empty")
	}
	if err := checkDescriptors(len(req.GetDescriptors())); err != nil {
		return nil, err
	}
	checks := make([]policy.Check, len(req.GetDescriptors()))
	var hits, refunds []int // the descriptors that spend, and those that give back
	for i, d := range req.GetDescriptors() {
		c, err := toCheck(req, d)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: %v", i, err)
		}
		checks[i] = c
		if d.GetIsNegativeHits() {
			refunds = append(refunds, i)
		} else {
			hits = append(hits, i)
		}
	}
	if refunds == nil {
		return s.check(ctx, checks)
	}
	return s.refund(ctx, checks, hits, refunds)
}

// refund answers a request with descriptors that give back
// (is_negative_hits): those are refunded first (policy.Engine.Refund),
// each answered OK with what remains, then the others are decided as one
// request. In a request that holds both, an error's checks[i] counts
// among the descriptors of its kind.
func (s *RulesService) refund(ctx context.Context, checks []policy.Check, hits, refunds []int) (*rlsv3.RateLimitResponse, error) {
	pick := func(idx []int) []policy.Check {
		out := make([]policy.Check, len(idx))
		for i, j := range idx {
			out[i] = checks[j]
		}
		return out
	}
	dec, err := s.engine.Refund(ctx, pick(refunds)...)
	if err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, status.Errorf(codes.FailedPrecondition, "is_negative_hits: %v", err)
		}
		return nil, checkError(err)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks))}
	for i := range dec.Applied {
		resp.Statuses[refunds[dec.Applied[i].Check]] = descriptorStatus(&dec.Applied[i])
	}
	if len(hits) > 0 {
		sub, err := s.check(ctx, pick(hits))
		if err != nil {
			return nil, err
		}
		resp.OverallCode = sub.OverallCode
		for i, st := range sub.Statuses {
			resp.Statuses[hits[i]] = st
		}
	}
	return resp, nil
}

// check decides checks, none of which gives back, as one request.
func (s *RulesService) check(ctx context.Context, checks []policy.Check) (*rlsv3.RateLimitResponse, error) {
	dec, err := s.engine.Check(ctx, checks...)
	if errors.Is(err, sluice.ErrInvalidCost) {
		return s.impossible(ctx, checks)
	}
	if err != nil {
		return nil, checkError(err)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks))}
	if !dec.Allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	for i := range resp.Statuses {
		// A rule in shadow mode that a denied request never reached.
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	for i := range dec.Applied {
		resp.Statuses[dec.Applied[i].Check] = descriptorStatus(&dec.Applied[i])
	}
	return resp, nil
}

// impossible answers a request with a cost that a limit of a rule not in
// shadow mode could never admit: OVER_LIMIT, spending nothing, and each
// descriptor's state as it is (read with cost 0), so that Envoy still
// hears each limit and what remains of it. The descriptors whose cost is
// impossible are the ones over the limit.
func (s *RulesService) impossible(ctx context.Context, checks []policy.Check) (*rlsv3.RateLimitResponse, error) {
	look := slices.Clone(checks)
	zero := 0
	for i := range look {
		look[i].Cost = &zero
	}
	dec, err := s.engine.Check(ctx, look...)
	if err != nil {
		return nil, checkError(err)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks))}
	for i := range dec.Applied {
		a := &dec.Applied[i]
		st := descriptorStatus(a)
		cost := a.Rule.Cost
		if c := checks[a.Check].Cost; c != nil {
			cost = *c
		}
		for _, l := range a.Limits {
			if l.ValidateCost(cost) != nil && !a.Rule.Shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
		resp.Statuses[a.Check] = st
	}
	return resp, nil
}

// checkError maps an error of Engine.Check to a gRPC status: a check that
// can never be decided is InvalidArgument, a failing store Unavailable.
func checkError(err error) error {
	if _, unknown := errors.AsType[*policy.UnknownRuleError](err); unknown ||
		errors.Is(err, policy.ErrInvalidKey) || errors.Is(err, policy.ErrDuplicateCheck) || errors.Is(err, sluice.ErrInvalidCost) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return storeError(err)
}

// toCheck returns the check a descriptor asks for.
func toCheck(req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor) (policy.Check, error) {
	var c policy.Check
	var client []string
	named, classed := false, false
	for _, e := range d.GetEntries() {
		if e.GetKey() == RuleEntry && !named {
			c.Rule, named = e.GetValue(), true
			continue
		}
		if e.GetKey() == ClassEntry && !classed {
			c.Class, classed = e.GetValue(), true
			continue
		}
		client = append(client, strconv.Itoa(len(e.GetKey()))+":"+e.GetKey()+"="+strconv.Itoa(len(e.GetValue()))+":"+e.GetValue())
		c.Key = e.GetValue()
	}
	if !named {
		return c, fmt.Errorf("no %q entry names a rule", RuleEntry)
	}
	if len(client) > 1 {
		// Each key and value length-prefixed, so that no two descriptors
		// make one key whatever bytes their entries hold.
		c.Key, c.Composite = strings.Join(client, ";"), true
	}
	if n := req.GetHitsAddend(); n > 0 {
		cost := int(min(n, math.MaxInt32))
		c.Cost = &cost
	}
	if n := d.GetHitsAddend(); n != nil {
		cost := int(min(n.GetValue(), math.MaxInt32))
		c.Cost = &cost
	}
	return c, nil
}

// descriptorStatus reports a's part of a decision to Envoy.
func descriptorStatus(a *policy.Applied) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if a.Outcome == policy.Denied || a.Outcome == policy.DegradedDenied {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if len(a.Results) == 0 {
		return st
	}
	l, r := a.Limits[a.Binding], a.Result()
	if r.Degraded.MadeUp() {
		return st
	}
	u, _ := unitOfPeriod(l.Period)
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
		Name:            l.Name + " (" + l.Named("").String() + ")",
		RequestsPerUnit: uint32(min(int64(l.Limit), math.MaxUint32)),
		Unit:            u.current,
	}
	st.LimitRemaining = uint32(min(max(int64(r.Remaining), 0), math.MaxUint32))
	st.DurationUntilReset = durationpb.New(r.ResetAfter)
	return st
}
