//go:build integration

package envoy

import (
	"bytes"
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/redis"
)

// TestDegradedNumbers: while the store is down, a status decided by
// AllowOnError or DenyOnError carries its code and nothing else (no
// current_limit, limit_remaining or duration_until_reset, no RateLimit
// headers): those numbers would be made up. The local fallback's are a
// real count, and reported.
func TestDegradedNumbers(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redis.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv.Stop()
	for _, tt := range []struct {
		name    string
		policy  sluice.ErrorPolicy
		code    rlsv3.RateLimitResponse_Code
		numbers bool
	}{
		{"allow", sluice.AllowOnError, OK, false},
		{"deny", sluice.DenyOnError, OVER, false},
		{"local", sluice.LocalOnError(memory.New()), OK, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim := sluice.New(store, sluice.WithErrorPolicy(tt.policy))
			check := func(t *testing.T, what string, resp *rlsv3.RateLimitResponse, headers bool) {
				t.Helper()
				if resp.OverallCode != tt.code || len(resp.Statuses) != 1 {
					t.Fatalf("%s: %v, want %v with one status", what, resp, tt.code)
				}
				st := resp.Statuses[0]
				has := st.CurrentLimit != nil || st.DurationUntilReset != nil
				if st.Code != tt.code || has != tt.numbers || (!tt.numbers && st.LimitRemaining != 0) {
					t.Errorf("%s: status %v; want %v, numbers %v", what, st, tt.code, tt.numbers)
				}
				if tt.numbers && (st.LimitRemaining != 1 || st.CurrentLimit.GetRequestsPerUnit() != 2) {
					t.Errorf("%s: status %v; want the local count, 1 of 2 left", what, st)
				}
				if got := len(resp.ResponseHeadersToAdd) > 0; got != headers {
					t.Errorf("%s: response headers %v; want some %v", what, resp.ResponseHeadersToAdd, headers)
				}
			}

			rules, _ := rulesService(t, lim, `
rules:
  - {name: login, key: ip, limit: 2, period: 1m}
`)
			fx := &fixture{client: serve(t, rules)}
			resp, err := fx.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "remote_address", "203.0.113.7")}})
			if err != nil {
				t.Fatal(err)
			}
			check(t, "RulesService", resp, false) // it adds no headers at all

			svc := NewService(lim, mustLoad(t, "edge.yaml"), WithHeaders(HeadersIETF))
			fx = &fixture{client: serve(t, svc)}
			resp, err = fx.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "192.168.1.1")}})
			if err != nil {
				t.Fatal(err)
			}
			check(t, "Service", resp, tt.numbers)
		})
	}
}

// rawCodec sends and receives messages as bytes, so that a test can put
// on the wire what a protobuf client would refuse to marshal.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return proto.Marshal(v.(proto.Message))
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	if b, ok := v.(*[]byte); ok {
		*b = append((*b)[:0], data...)
		return nil
	}
	return proto.Unmarshal(data, v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// TestInvalidUTF8OnTheWire: protobuf strings must be UTF-8, so a
// descriptor value that is not never reaches either service. A Go client
// cannot send it (marshaling fails before the call: Internal); one that
// puts the bytes on the wire anyway gets Internal from the server's
// unmarshaling, and nothing is decided.
func TestInvalidUTF8OnTheWire(t *testing.T) {
	rules, _ := rulesService(t, sluice.New(memory.New()), `
rules:
  - {name: login, key: "header:X-Key", limit: 1, period: 1m}
`)
	conn := dial(t, rules)
	client := rlsv3.NewRateLimitServiceClient(conn)

	bad := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "x-key", "a\xffb")}}
	_, err := client.ShouldRateLimit(context.Background(), bad)
	if status.Code(err) != codes.Internal {
		t.Errorf("a Go client sending invalid UTF-8: %v, want Internal (marshaling refused)", err)
	}

	good := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("rule", "login", "x-key", "aZZb")}}
	wire, err := proto.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	wire = bytes.Replace(wire, []byte("aZZb"), []byte("a\xff\xfeb"), 1)
	var out []byte
	err = conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &wire, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.Internal {
		t.Errorf("invalid UTF-8 on the wire: %v, want Internal from the server's unmarshaling", err)
	}
}
