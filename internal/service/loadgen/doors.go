package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// Entry is one descriptor entry of a GRPC request: its value a Template.
type Entry struct {
	Key   string
	Value Template
}

// prebuilt is how many keys' requests GRPC and HTTPCheck build once,
// before the run, so that the client spends nothing on them per request
// (it shares the machine with the service it measures); beyond it they
// are built per request.
const prebuilt = 1 << 16

// GRPC returns the Func of Envoy's ShouldRateLimit over conn: a request
// of domain with one descriptor of entries, allowed when the overall code
// is OK, each call bounded by timeout; keys is the run's Options.Keys.
func GRPC(conn grpc.ClientConnInterface, domain string, entries []Entry, keys int, timeout time.Duration) Func {
	client := rlsv3.NewRateLimitServiceClient(conn)
	build := func(n int) *rlsv3.RateLimitRequest {
		d := &commonv3.RateLimitDescriptor{Entries: make([]*commonv3.RateLimitDescriptor_Entry, len(entries))}
		for i, e := range entries {
			d.Entries[i] = &commonv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value.Expand(n)}
		}
		return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}}
	}
	var reqs []*rlsv3.RateLimitRequest
	if keys <= prebuilt {
		reqs = make([]*rlsv3.RateLimitRequest, max(keys, 1))
		for n := range reqs {
			reqs[n] = build(n)
		}
	}
	return func(ctx context.Context, n int) (bool, error) {
		req := (*rlsv3.RateLimitRequest)(nil)
		if n < len(reqs) {
			req = reqs[n] // read only: gRPC marshals it, concurrently is fine
		} else {
			req = build(n)
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			return false, err
		}
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
	}
}

// HTTPCheck returns the Func of POST <base>/v1/check with client: a check
// of rule for the key of key, allowed on 200, denied on 429, an error on
// any other status; keys is the run's Options.Keys. The client's Timeout
// bounds each request.
func HTTPCheck(client *http.Client, base, rule string, key Template, keys int) Func {
	url := strings.TrimSuffix(base, "/") + "/v1/check"
	ruleJSON, _ := json.Marshal(rule)
	build := func(n int) []byte {
		k, _ := json.Marshal(key.Expand(n))
		return append(append(append(append([]byte(`{"rule":`), ruleJSON...), `,"key":`...), k...), '}')
	}
	var bodies [][]byte
	if keys <= prebuilt {
		bodies = make([][]byte, max(keys, 1))
		for n := range bodies {
			bodies[n] = build(n)
		}
	}
	return func(ctx context.Context, n int) (bool, error) {
		var body []byte
		if n < len(bodies) {
			body = bodies[n]
		} else {
			body = build(n)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			_, _ = io.Copy(io.Discard, resp.Body) // to the end: the connection is reused
			return true, nil
		case http.StatusTooManyRequests:
			_, _ = io.Copy(io.Discard, resp.Body)
			return false, nil
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		_, _ = io.Copy(io.Discard, resp.Body)
		return false, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}
}
