package deploy_test

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestEnvoyConfig: deploy/envoy/envoy.yaml is a valid Envoy v3 bootstrap
// (parsed into go-control-plane's types and checked by their validation
// rules, as Envoy checks it; Envoy itself is not installable here); its
// rate limit filter calls an HTTP/2 cluster at the headless Service's DNS
// name on the grpc port of the Service and the pod; and every descriptor
// its routes make, sent over gRPC to sluice serving the ConfigMap's
// policy file, meets a rule of it (OK with a current limit).
func TestEnvoyConfig(t *testing.T) {
	raw, err := os.ReadFile("envoy/envoy.yaml")
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
		filter *ratelimitv3.RateLimit
	)
	if err := boot.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	for _, f := range hcm.HttpFilters {
		if f.Name == "envoy.filters.http.ratelimit" {
			filter = &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(filter); err != nil {
				t.Fatal(err)
			}
		}
	}
	if filter == nil {
		t.Fatal("envoy.yaml has no envoy.filters.http.ratelimit filter")
	}

	// The cluster: HTTP/2, at the headless Service on the grpc port.
	k := loadKube(t)
	p := k.sluicePod(t)
	name := filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	var cluster *clusterv3.Cluster
	for _, c := range boot.StaticResources.Clusters {
		if c.Name == name {
			cluster = c
		}
	}
	if cluster == nil {
		t.Fatalf("no cluster %q, the filter's", name)
	}
	var opts upstreamsv3.HttpProtocolOptions
	if err := cluster.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&opts); err != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %q does not speak HTTP/2: %v", name, err)
	}
	sa := cluster.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress()
	headless := ""
	for _, s := range k.services {
		if s.Spec.ClusterIP != "None" {
			continue
		}
		headless = s.Metadata.Name + "." + s.Metadata.Namespace + ".svc.cluster.local"
		for _, sp := range s.Spec.Ports {
			if sp.TargetPort == "grpc" && uint32(sp.Port) != sa.GetPortValue() {
				t.Errorf("cluster %q on port %d, Service %s's grpc port is %d", name, sa.GetPortValue(), s.Metadata.Name, sp.Port)
			}
		}
	}
	if sa.GetAddress() != headless || cluster.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("cluster %q: %v %s, want STRICT_DNS %s (the headless Service: every pod, not one connection to a virtual IP)", name, cluster.GetType(), sa.GetAddress(), headless)
	}
	if uint32(p.ports["grpc"]) != sa.GetPortValue() {
		t.Errorf("cluster %q on port %d, the pod's grpc port is %d", name, sa.GetPortValue(), p.ports["grpc"])
	}
	if len(cluster.HealthChecks) == 0 || cluster.HealthChecks[0].GetGrpcHealthCheck() == nil {
		t.Errorf("cluster %q has no gRPC health check (sluice serves one)", name)
	}

	// The routes' descriptors, decided by sluice with the ConfigMap's rules.
	vol := newConfigMapVolume(t, p.cm.Data)
	env, httpAddr, grpcAddr := p.podEnv(t, vol.dir)
	startSluice(t, p.c.Args, env, "http://"+httpAddr+"/healthz")
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	routes := hcm.GetRouteConfig().VirtualHosts[0].Routes
	rules := map[string]bool{}
	for _, r := range routes {
		req := &rlsv3.RateLimitRequest{Domain: filter.Domain}
		for _, rl := range r.GetRoute().RateLimits {
			d := descriptorOf(t, rl)
			req.Descriptors = append(req.Descriptors, d)
			for _, e := range d.Entries {
				if e.Key == "rule" {
					rules[e.Value] = true
				}
			}
		}
		if len(req.Descriptors) == 0 {
			t.Errorf("route %s sends no descriptor", r.GetMatch().GetPrefix())
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rls.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("route %s: ShouldRateLimit(%v): %v", r.GetMatch().GetPrefix(), req, err)
		}
		for i, st := range resp.Statuses {
			if st.CurrentLimit == nil || st.Code != rlsv3.RateLimitResponse_OK {
				t.Errorf("route %s: descriptor %v meets no rule: %v", r.GetMatch().GetPrefix(), req.Descriptors[i], st)
			}
		}
	}
	// Every rule of the policy is asked for by some route.
	for _, want := range p.ruleNames(t) {
		if !rules[want] {
			t.Errorf("no route of envoy.yaml sends a descriptor of rule %s", want)
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
