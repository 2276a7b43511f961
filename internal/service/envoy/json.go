package envoy

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// MaxRequestBytes is the largest request the service is meant to take,
// as a gRPC message (sluice serve's listener refuses larger ones) or as
// JSONHandler's body: a ShouldRateLimit of MaxDescriptors descriptors is
// a few KiB (grpc-go's default cap is 4 MiB).
const MaxRequestBytes = 1 << 20

// JSONHandler serves svc as envoyproxy/ratelimit's POST /json does: the
// body is a RateLimitRequest in protobuf's JSON form, such as
//
//	{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "192.0.2.1"}]}]}
//
// and the answer is the RateLimitResponse in the same form, with status
// 200, or 429 Too Many Requests when its overall_code is OVER_LIMIT. A
// body that is not such a request (or is over MaxRequestBytes), or a request
// the service refuses as invalid, is a 400 whose text says what is wrong;
// a store failure the service returns is a 503 (upstream answers 400 to
// both).
func JSONHandler(svc rlsv3.RateLimitServiceServer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
		if err != nil {
			if _, big := errors.AsType[*http.MaxBytesError](err); big {
				http.Error(w, fmt.Sprintf("the body is larger than %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "the body is not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := svc.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			code := http.StatusServiceUnavailable
			if status.Code(err) == codes.InvalidArgument {
				code = http.StatusBadRequest
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}
