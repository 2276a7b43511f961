package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/internal/service/envoytest"
	"github.com/sluice-go/sluice/store/memory"
)

// TestEnvoyExample: examples/envoy/envoy.yaml is a valid Envoy v3
// bootstrap (parsed into go-control-plane's types and checked by their
// validation rules, as Envoy checks it), its rate limit filter asks for a
// domain that examples/envoy/config serves over an HTTP/2 cluster on
// serve's default gRPC address, every descriptor its routes' actions
// make gets a configured limit (docs/envoy.md shows both files as they
// are: package docs checks it).
func TestEnvoyExample(t *testing.T) {
	b := envoytest.Load(t, "../../examples/envoy/envoy.yaml")
	cfg, err := envoy.LoadConfig("../../examples/envoy/config")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Domains[b.RateLimit.Domain] == nil {
		t.Fatalf("the filter's domain %q is not in examples/envoy/config", b.RateLimit.Domain)
	}

	// The rate limit service's cluster: HTTP/2, on serve's default
	// --grpc-listen.
	var help bytes.Buffer
	Run(context.Background(), []string{"serve", "--help"}, &help, &help)
	def := regexp.MustCompile(`-grpc-listen string\n.*\(default "([^"]+)"\)`).FindStringSubmatch(help.String())
	if def == nil {
		t.Fatalf("serve --help names no --grpc-listen default:\n%s", help.String())
	}
	name, sa := b.Cluster.Name, b.Address()
	if got := sa.GetAddress() + ":" + strconv.Itoa(int(sa.GetPortValue())); got != def[1] {
		t.Errorf("cluster %q at %s, serve's default --grpc-listen is %s", name, got, def[1])
	}

	// What Envoy sends for a request from 192.0.2.1 with an x-api-key:
	// one descriptor per rate_limits entry of the route, each of which
	// must meet a limit of the configuration.
	svc := envoy.NewService(sluice.New(memory.New()), cfg)
	for _, r := range b.Routes() {
		req := &rlsv3.RateLimitRequest{Domain: b.RateLimit.Domain, Descriptors: envoytest.Descriptors(t, r)}
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

}
