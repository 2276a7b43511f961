package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	sluiceredis "github.com/sluice-go/sluice/store/redis"
)

// decideOver opens the store at url and runs one decision through it,
// returning the error of Open or of the decision.
func decideOver(url string) error {
	s, err := sluiceredis.Open(url, prefix())
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
