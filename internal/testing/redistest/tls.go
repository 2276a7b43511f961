package redistest

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"

	"github.com/sluice-go/sluice/internal/testing/certtest"
	"github.com/sluice-go/sluice/internal/testing/proc"
)

// TLSFiles are the PEM files of a throwaway PKI for a test
// (certtest.Files): a CA, a server certificate for 127.0.0.1 and
// localhost, which servers also present as clients, on the Cluster bus
// and replication links, and a client certificate for mutual TLS.
type TLSFiles = certtest.Files

// NewTLSFiles generates a CA and the certificates of TLSFiles for t
// (certtest.NewFiles). Each call makes a new CA, which trusts none of
// another call's certificates.
func NewTLSFiles(t testing.TB) TLSFiles {
	t.Helper()
	return certtest.NewFiles(t)
}

// serverArgs returns the redis-server arguments that add a TLS port with
// f's server certificate, trusting f's CA, and asking clients for no
// certificate (extra arguments may say "--tls-auth-clients", "yes").
func serverArgs(f TLSFiles, tlsPort int) []string {
	return []string{
		"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", f.ServerCert,
		"--tls-key-file", f.ServerKey,
		"--tls-ca-cert-file", f.CA,
		"--tls-auth-clients", "no",
	}
}

// StartTLS starts a redis-server for t as Start does, with a TLS port
// besides its plain one (Addr, which the helpers use), serving a
// certificate of new TLSFiles, which it returns. extra are more
// redis-server arguments, such as "--tls-auth-clients", "yes" to require a
// client certificate signed by the CA.
func StartTLS(t testing.TB, extra ...string) (*Server, TLSFiles) {
	t.Helper()
	path := Need(t)
	files := NewTLSFiles(t)
	return startTLS(t, path, files, "", extra...), files
}

// startTLS starts a redis-server at path for t with a plain port and a TLS
// port serving files (see redisproc.Start for configFile and extra), and
// stops it when t ends.
func startTLS(t testing.TB, path string, files TLSFiles, configFile string, extra ...string) *Server {
	t.Helper()
	return retryPorts(t, func(port int) (*Server, error) {
		p, err := freePorts(port, 1)
		if err != nil {
			return nil, err
		}
		s, err := launch(path, t.TempDir(), port, configFile, append(serverArgs(files, p[0]), extra...)...)
		if err != nil {
			return nil, err
		}
		s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p[0]))
		return s, nil
	})
}

// freePorts returns n free ports other than port, for the further ports
// of a server on port (the cluster bus, TLS).
func freePorts(port, n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		p, err := proc.FreePort()
		if err != nil {
			return nil, err
		}
		if p == port || slices.Contains(ports, p) {
			return nil, fmt.Errorf("the kernel handed out port %d twice", p)
		}
		ports = append(ports, p)
	}
	return ports, nil
}
