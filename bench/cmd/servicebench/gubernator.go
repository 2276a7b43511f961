package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-go/sluice/internal/service/loadgen"
)

// gubernator's V1 GetRateLimits, spoken with the messages encoded here
// (pb.gubernator.GetRateLimitsReq and GetRateLimitsResp of its
// gubernator.proto at v2.13.0) rather than through its Go module, whose
// dependencies (Kubernetes, etcd, OpenTelemetry) would otherwise enter
// this module for one call.

const gubernatorMethod = "/pb.gubernator.V1/GetRateLimits"

// rawMessage is a message already encoded, passed through by rawCodec.
type rawMessage struct{ b []byte }

// rawCodec is a gRPC codec of rawMessages, named "proto" so that the
// call's content type is application/grpc+proto as gubernator expects.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(*rawMessage).b, nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	v.(*rawMessage).b = append(v.(*rawMessage).b[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// gubernatorRequest encodes a GetRateLimitsReq of one RateLimitReq: name,
// unique_key, hits 1, limit, duration in milliseconds, TOKEN_BUCKET (0)
// and BATCHING (0, the default, which a single node decides locally).
func gubernatorRequest(name, key string, limit int64, duration time.Duration) []byte {
	var r []byte
	r = protowire.AppendTag(r, 1, protowire.BytesType)
	r = protowire.AppendString(r, name)
	r = protowire.AppendTag(r, 2, protowire.BytesType)
	r = protowire.AppendString(r, key)
	r = protowire.AppendTag(r, 3, protowire.VarintType)
	r = protowire.AppendVarint(r, 1)
	r = protowire.AppendTag(r, 4, protowire.VarintType)
	r = protowire.AppendVarint(r, uint64(limit))
	r = protowire.AppendTag(r, 5, protowire.VarintType)
	r = protowire.AppendVarint(r, uint64(duration.Milliseconds()))
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, r)
}

// gubernatorAnswer decodes the first RateLimitResp of a
// GetRateLimitsResp: under the limit or not, or its error.
func gubernatorAnswer(b []byte) (under bool, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return false, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		resp, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		return rateLimitResp(resp)
	}
	return false, errors.New("gubernator: no response in GetRateLimitsResp")
}

// rateLimitResp decodes a RateLimitResp's status (1) and error (5).
func rateLimitResp(b []byte) (under bool, err error) {
	status, msg := uint64(0), ""
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false, protowire.ParseError(n)
			}
			status, b = v, b[n:]
		case num == 5 && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			if n < 0 {
				return false, protowire.ParseError(n)
			}
			msg, b = v, b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	if msg != "" {
		return false, fmt.Errorf("gubernator: %s", msg)
	}
	return status == 0, nil // UNDER_LIMIT
}

// gubernatorFunc returns the Func of GetRateLimits over conn: one hit of
// a token bucket of limit per duration for the key of template, each
// call bounded by timeout. Requests for up to keys keys are encoded once.
func gubernatorFunc(conn *grpc.ClientConn, key loadgen.Template, keys int, limit int64, duration, timeout time.Duration) loadgen.Func {
	reqs := make([]*rawMessage, keys)
	for n := range reqs {
		reqs[n] = &rawMessage{gubernatorRequest("bench", key.Expand(n), limit, duration)}
	}
	return func(ctx context.Context, n int) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var resp rawMessage
		if err := conn.Invoke(ctx, gubernatorMethod, reqs[n%len(reqs)], &resp, grpc.ForceCodec(rawCodec{})); err != nil {
			return false, err
		}
		return gubernatorAnswer(resp.b)
	}
}
