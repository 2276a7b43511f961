// Package envoytest reads an Envoy bootstrap file as Envoy would, for the
// tests that hold sluice's Envoy example and deployment files to Envoy's
// rules and to sluice (Envoy itself is not installable where they run).
package envoytest

import (
	"cmp"
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3" // the router filter's type, which the files name
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// Bootstrap is an Envoy v3 bootstrap file, parsed and validated, with the
// parts the tests look at.
type Bootstrap struct {
	*bootstrapv3.Bootstrap
	// HCM is the first listener's HTTP connection manager.
	HCM *hcmv3.HttpConnectionManager
	// RateLimit is its envoy.filters.http.ratelimit filter.
	RateLimit *ratelimitv3.RateLimit
	// Cluster is the cluster the filter calls, which speaks HTTP/2.
	Cluster *clusterv3.Cluster
}

// Load reads the bootstrap file at path into go-control-plane's types and
// checks it with their validation rules, as Envoy does. It fails t unless
// the file is valid, its first listener's HTTP connection manager has a
// rate limit filter, and the filter's cluster exists and speaks HTTP/2
// (gRPC).
func Load(t testing.TB, path string) *Bootstrap {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	b := &Bootstrap{Bootstrap: &bootstrapv3.Bootstrap{}, HCM: &hcmv3.HttpConnectionManager{}}
	if err := protojson.Unmarshal(js, b.Bootstrap); err != nil {
		t.Fatalf("%s is not an Envoy v3 bootstrap: %v", path, err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("%s fails Envoy's validation: %v", path, err)
	}
	if err := b.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(b.HCM); err != nil {
		t.Fatalf("%s: the first listener's first filter: %v", path, err)
	}
	for _, f := range b.HCM.HttpFilters {
		if f.Name == "envoy.filters.http.ratelimit" {
			b.RateLimit = &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(b.RateLimit); err != nil {
				t.Fatalf("%s: the rate limit filter: %v", path, err)
			}
		}
	}
	if b.RateLimit == nil {
		t.Fatalf("%s has no envoy.filters.http.ratelimit filter", path)
	}
	name := b.RateLimit.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	for _, c := range b.StaticResources.Clusters {
		if c.Name == name {
			b.Cluster = c
		}
	}
	if b.Cluster == nil {
		t.Fatalf("%s: no cluster %q, the rate limit filter's", path, name)
	}
	var opts upstreamsv3.HttpProtocolOptions
	if err := b.Cluster.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&opts); err != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Fatalf("%s: cluster %q does not speak HTTP/2: %v", path, name, err)
	}
	return b
}

// Address returns the socket address of the cluster's first endpoint.
func (b *Bootstrap) Address() *corev3.SocketAddress {
	return b.Cluster.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress()
}

// Routes returns the routes of the connection manager's first virtual
// host.
func (b *Bootstrap) Routes() []*routev3.Route {
	return b.HCM.GetRouteConfig().VirtualHosts[0].Routes
}

// Descriptors returns the descriptors Envoy makes of r's rate_limits for a
// request from 192.0.2.1 that carries every header an action reads (each
// with the value "some-key"). It fails t on an action it cannot make.
func Descriptors(t testing.TB, r *routev3.Route) []*commonv3.RateLimitDescriptor {
	t.Helper()
	var out []*commonv3.RateLimitDescriptor
	for _, rl := range r.GetRoute().RateLimits {
		out = append(out, Descriptor(t, rl))
	}
	return out
}

// PerRoute returns the rate_limits of r's per-route configuration of the
// rate limit filter (typed_per_filter_config's RateLimitPerRoute), where
// Envoy reads hits_addend and apply_on_stream_done; nil when it has none.
func PerRoute(t testing.TB, r *routev3.Route) []*routev3.RateLimit {
	t.Helper()
	any, ok := r.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"]
	if !ok {
		return nil
	}
	per := &ratelimitv3.RateLimitPerRoute{}
	if err := any.UnmarshalTo(per); err != nil {
		t.Fatalf("route %s: the rate limit filter's per-route configuration: %v", r.GetMatch().GetPrefix(), err)
	}
	return per.GetRateLimits()
}

// Descriptor returns the descriptor Envoy makes of rl for a request from
// 192.0.2.1 that carries every header an action reads (each with the
// value "some-key"), with rl's hits_addend number and is_negative_hits.
// It fails t on an action it cannot make, and on a hits_addend format
// (a value of the request or response).
func Descriptor(t testing.TB, rl *routev3.RateLimit) *commonv3.RateLimitDescriptor {
	t.Helper()
	d := &commonv3.RateLimitDescriptor{}
	add := func(k, v string) {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	for _, a := range rl.Actions {
		switch {
		case a.GetRemoteAddress() != nil:
			add("remote_address", "192.0.2.1")
		case a.GetGenericKey() != nil:
			g := a.GetGenericKey()
			add(cmp.Or(g.GetDescriptorKey(), "generic_key"), g.GetDescriptorValue())
		case a.GetRequestHeaders() != nil:
			add(a.GetRequestHeaders().GetDescriptorKey(), "some-key")
		default:
			t.Fatalf("action %v: envoytest does not make its entry", a)
		}
	}
	if h := rl.GetHitsAddend(); h != nil {
		if h.GetFormat() != "" {
			t.Fatalf("hits_addend format %q: envoytest does not make it", h.GetFormat())
		}
		d.HitsAddend, d.IsNegativeHits = h.GetNumber(), h.GetIsNegativeHits()
	}
	return d
}
