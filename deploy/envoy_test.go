//go:build e2e

package deploy_test

import (
	"context"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/internal/service/envoytest"
)

// TestEnvoyConfig: deploy/envoy/envoy.yaml is a valid Envoy v3 bootstrap
// (parsed into go-control-plane's types and checked by their validation
// rules, as Envoy checks it; Envoy itself is not installable here); its
// rate limit filter calls an HTTP/2 cluster at the headless Service's DNS
// name on the grpc port of the Service and the pod; and every descriptor
// its routes make, sent over gRPC to sluice serving the ConfigMap's
// policy file, meets a rule of it (OK with a current limit).
func TestEnvoyConfig(t *testing.T) {
	b := envoytest.Load(t, "envoy/envoy.yaml")

	// The cluster: HTTP/2, at the headless Service on the grpc port.
	k := loadKube(t)
	p := k.sluicePod(t)
	name, cluster := b.Cluster.Name, b.Cluster
	sa := b.Address()
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
	env, httpAddr, _ := p.podEnv(t, vol.dir)
	startSluice(t, p.c.Args, env, "http://"+httpAddr+"/healthz")
	grpcAddr := env["SLUICE_GRPC_LISTEN"] // moved if taken
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	rules := map[string]bool{}
	for _, r := range b.Routes() {
		req := &rlsv3.RateLimitRequest{Domain: b.RateLimit.Domain, Descriptors: envoytest.Descriptors(t, r)}
		for _, d := range req.Descriptors {
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
