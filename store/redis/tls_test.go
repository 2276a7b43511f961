//go:build integration

package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// decideOver opens the store at url and runs one decision through it,
// returning the error of Open or of the decision.
func decideOver(url string) error {
	s, err := redis.Open(url, prefix())
	if err != nil {
		return err
	}
	defer s.Close()
	r, err := sluice.New(s).Allow(context.Background(), "tls", sluice.PerMinute(10))
	if err == nil && !r.Allowed {
		return errDenied
	}
	return err
}

// errDenied is decideOver's error for a first decision that was denied.
var errDenied = errors.New("the first decision under 10 per minute was denied")

// checkDecision fails t unless decideOver(url) succeeds (want == nil) or
// fails with an error holding every string of want.
func checkDecision(t *testing.T, url string, want []string) {
	t.Helper()
	err := decideOver(url)
	switch {
	case want == nil && err != nil:
		t.Errorf("decision over TLS failed: %v", err)
	case want != nil && err == nil:
		t.Errorf("decision over TLS succeeded, want an error with %q", want)
	case want != nil:
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("decision over TLS failed with %v, want it to say %q", err, w)
			}
		}
	}
}

// TestTLS: a redis-server serving TLS with a certificate of a test CA is
// reached with tls_ca_file, or tls_server_name naming another name of its
// certificate, or skip_verify; and refused, with the cause in the error,
// without its CA, with another CA, or with a name its certificate lacks.
func TestTLS(t *testing.T) {
	srv, pki := redistest.StartTLS(t)
	other := redistest.NewTLSFiles(t)
	base := "rediss://" + srv.TLSAddr + "?"
	for _, tc := range []struct {
		name, query string
		want        []string // nil: the decision succeeds
	}{
		{"CA", "tls_ca_file=" + pki.CA, nil},
		{"server name", "tls_ca_file=" + pki.CA + "&tls_server_name=localhost", nil},
		{"skip verify", "skip_verify=true", nil},
		{"system roots", "", []string{"certificate signed by unknown authority"}},
		{"wrong CA", "tls_ca_file=" + other.CA, []string{"certificate signed by unknown authority"}},
		{"wrong name", "tls_ca_file=" + pki.CA + "&tls_server_name=redis.example", []string{"certificate is valid for localhost", "not redis.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkDecision(t, base+tc.query, tc.want) })
	}
}

// TestMutualTLS: a redis-server that requires a client certificate
// (tls-auth-clients yes) serves a store given one of its CA, with
// tls_cert_file and tls_key_file, and refuses one without, or with a
// certificate of another CA, with the cause in the error.
func TestMutualTLS(t *testing.T) {
	srv, pki := redistest.StartTLS(t, "--tls-auth-clients", "yes")
	other := redistest.NewTLSFiles(t)
	base := "rediss://" + srv.TLSAddr + "?tls_ca_file=" + pki.CA
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"client certificate", "&tls_cert_file=" + pki.ClientCert + "&tls_key_file=" + pki.ClientKey, nil},
		// Under TLS 1.3 the client's handshake ends before the server
		// checks its certificate: the server's refusal reaches the client
		// as an alert ("tls: certificate required", "tls: unknown
		// certificate authority") or as the connection reset, depending on
		// timing.
		{"no client certificate", "", []string{"redis store: connect: "}},
		{"certificate of another CA", "&tls_cert_file=" + other.ClientCert + "&tls_key_file=" + other.ClientKey, []string{"redis store: connect: "}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkDecision(t, base+tc.query, tc.want) })
	}
}

// tlsQuery is the query of a URL trusting the CA of pki and presenting
// its client certificate.
func tlsQuery(pki redistest.TLSFiles) string {
	return "tls_ca_file=" + pki.CA + "&tls_cert_file=" + pki.ClientCert + "&tls_key_file=" + pki.ClientKey
}

// TestClusterTLS: a store opened on a Cluster's TLS ports, with mutual
// TLS, decides on every master (each one verified for its own address),
// and a decision split over slots succeeds.
func TestClusterTLS(t *testing.T) {
	c, pki := redistest.StartClusterTLS(t)
	// As the minimal user the README lists for a Cluster.
	rules := append([]string{"ACL", "SETUSER", "sluice", "reset", "on", ">pw", "~*", "-@all", "+cluster|shards", "+cluster|slots"}, aclRules()...)
	for _, addr := range c.Addrs {
		c.Do(t, addr, rules...)
	}
	url := "rediss://sluice:pw@" + c.TLSAddrs[0] + "?" + tlsQuery(pki)
	s := openOrFail(t, url, prefix())
	lim := sluice.New(s)
	ctx := readyCtx(t)
	// Keys until every master has served one.
	served := map[string]bool{}
	for i := 0; len(served) < len(c.Addrs) && i < 1000; i++ {
		k := "k" + strconv.Itoa(i)
		r, err := lim.Allow(ctx, k, sluice.PerMinute(10))
		if err != nil || !r.Allowed {
			t.Fatalf("decision on %s over TLS: %+v, %v", k, r, err)
		}
		served[c.Owner(t, c.KeySlot(t, "{"+k+"}"))] = true
	}
	if len(served) != len(c.Addrs) {
		t.Errorf("decisions reached %d masters, want %d", len(served), len(c.Addrs))
	}
	req := sluice.Request{Parts: []sluice.Part{
		{Key: "a", Limits: []sluice.Limit{sluice.PerMinute(5)}, Cost: 1},
		{Key: "b", Limits: []sluice.Limit{sluice.PerMinute(5)}, Cost: 1},
		{Key: "c", Limits: []sluice.Limit{sluice.PerMinute(5)}, Cost: 1},
	}}
	if rs, err := s.Take(ctx, req); err != nil || len(rs) != 3 || !rs[0].Allowed || !rs[2].Allowed {
		t.Errorf("a decision over three client keys over TLS: %+v, %v", rs, err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Errorf("Ready over TLS: %v", err)
	}
	// The store reached every master on its TLS port (CLIENT LIST names
	// the port a client came in by as laddr).
	for i, addr := range c.Addrs {
		if list, _ := c.Do(t, addr, "CLIENT", "LIST").(string); !strings.Contains(list, "laddr="+c.TLSAddrs[i]+" ") {
			t.Errorf("master %s has no client on its TLS port %s:\n%s", addr, c.TLSAddrs[i], list)
		}
	}
}

// TestSentinelTLS: a store opened through sentinels on their TLS ports,
// with mutual TLS, decides on the primary the sentinels name, reached on
// its TLS port; sentinels and primary alike are dialed with TLS.
func TestSentinelTLS(t *testing.T) {
	sn, pki := redistest.StartSentinelTLS(t)
	// As the minimal user the README lists through Sentinel, on both
	// data nodes (the sentinels take no password).
	for _, addr := range sn.NodeAddrs() {
		admin := newRueidis(t, addr)
		setUser(t, admin, "sluice", "pw", append([]string{"~*", "-@all", "+role"}, aclRules()...)...)
	}
	s := openOrFail(t, strings.Replace(sn.URL(), "rediss://", "rediss://sluice:pw@", 1)+"&"+tlsQuery(pki), prefix())
	ctx := readyCtx(t)
	lim := sluice.New(s)
	for i := range 3 {
		r, err := lim.Allow(ctx, "k", sluice.PerMinute(2))
		if err != nil || r.Allowed != (i < 2) {
			t.Fatalf("decision %d through Sentinel over TLS: %+v, %v; want %v", i, r, err, i < 2)
		}
	}
	if err := s.Ready(ctx); err != nil {
		t.Errorf("Ready through Sentinel over TLS: %v", err)
	}
	primary, err := sn.Primary()
	if err != nil {
		t.Fatal(err)
	}
	// The store reached the primary, which the sentinels name by its TLS
	// address, there, and one of the sentinels on its TLS port (CLIENT
	// LIST names the address a client came in by as laddr).
	clients := func(addr string) string {
		c := newRueidis(t, addr) // the default user: the sentinels' and the admin's
		list, err := c.Do(ctx, c.B().ClientList().Build()).ToString()
		if err != nil {
			t.Fatalf("CLIENT LIST on %s: %v", addr, err)
		}
		return list
	}
	if list := clients(sn.Node(t, primary).Addr); !strings.Contains(list, "laddr="+primary+" ") {
		t.Errorf("the primary has no client on its TLS address %s:\n%s", primary, list)
	}
	onTLS := 0
	for i, addr := range sn.Addrs {
		if strings.Contains(clients(addr), "laddr="+sn.TLSAddrs[i]+" ") {
			onTLS++
		}
	}
	if onTLS == 0 {
		t.Errorf("no sentinel has a client on its TLS port %v", sn.TLSAddrs)
	}
}
