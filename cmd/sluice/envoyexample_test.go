package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/envoy"
	"github.com/sluice-go/sluice/store/memory"
)

// TestEnvoyExample: examples/envoy/envoy.yaml is a valid Envoy v3
// bootstrap (parsed into go-control-plane's types and checked by their
// validation rules, as Envoy checks it), its rate limit filter asks for a
// domain that examples/envoy/config serves over an HTTP/2 cluster on
// serve's default gRPC address, every descriptor its routes' actions
// make gets a configured limit, and the README shows both files as they
// are.
func TestEnvoyExample(t *testing.T) {
	raw, err := os.ReadFile("../../examples/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy v3 bootstrap: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml fails Envoy's validation: %v", err)
	}

	var (
		hcm    hcmv3.HttpConnectionManager
		filter ratelimitv3.RateLimit
	)
	if err := boot.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	for _, f := range hcm.HttpFilters {
		if f.Name == "envoy.filters.http.ratelimit" {
			if err := f.GetTypedConfig().UnmarshalTo(&filter); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg, err := envoy.LoadConfig("../../examples/envoy/config")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Domains[filter.Domain] == nil {
		t.Fatalf("the filter's domain %q is not in examples/envoy/config", filter.Domain)
	}

	// The rate limit service's cluster: HTTP/2, on serve's default
	// --grpc-listen.
	var help bytes.Buffer
	Run(context.Background(), []string{"serve", "--help"}, &help, &help)
	def := regexp.MustCompile(`-grpc-listen string\n.*\(default "([^"]+)"\)`).FindStringSubmatch(help.String())
	if def == nil {
		t.Fatalf("serve --help names no --grpc-listen default:\n%s", help.String())
	}
	name := filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	var sluiceCluster *clusterv3.Cluster
	for _, c := range boot.StaticResources.Clusters {
		if c.Name == name {
			sluiceCluster = c
		}
	}
	if sluiceCluster == nil {
		t.Fatalf("no cluster %q", name)
	}
	var opts upstreamsv3.HttpProtocolOptions
	if err := sluiceCluster.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&opts); err != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %q does not speak HTTP/2: %v", name, err)
	}
	sa := sluiceCluster.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress()
	if got := sa.GetAddress() + ":" + strconv.Itoa(int(sa.GetPortValue())); got != def[1] {
		t.Errorf("cluster %q at %s, serve's default --grpc-listen is %s", name, got, def[1])
	}

	// What Envoy sends for a request from 192.0.2.1 with an x-api-key:
	// one descriptor per rate_limits entry of the route, each of which
	// must meet a limit of the configuration.
	svc := envoy.NewService(sluice.New(memory.New()), cfg)
	routes := hcm.GetRouteConfig().VirtualHosts[0].Routes
	for _, r := range routes {
		req := &rlsv3.RateLimitRequest{Domain: filter.Domain}
		for _, rl := range r.GetRoute().RateLimits {
			req.Descriptors = append(req.Descriptors, descriptorOf(t, rl))
		}
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range resp.Statuses {
			if st.CurrentLimit == nil || st.Code != rlsv3.RateLimitResponse_OK {
				t.Errorf("route %s: descriptor %v meets no limit: %v", r.GetMatch().GetPrefix(), req.Descriptors[i], st)
			}
		}
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"../../examples/envoy/envoy.yaml", "../../examples/envoy/config/edge.yaml"} {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(readme, append(append([]byte("```yaml\n"), body...), "```"...)) {
			t.Errorf("README lacks %s as it is, in a yaml block", strings.TrimPrefix(f, "../../"))
		}
	}
}

// descriptorOf returns the descriptor Envoy makes of rl's actions for a
// request from 192.0.2.1 carrying every header an action reads.
func descriptorOf(t *testing.T, rl *routev3.RateLimit) *commonv3.RateLimitDescriptor {
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
			t.Fatalf("action %v: the test does not make its entry", a)
		}
	}
	return d
}
