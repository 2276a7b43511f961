package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/proc"
)

// TLSFiles are the PEM files of a throwaway PKI for a test, written in a
// temporary directory of its own: a CA, and two certificates it signed.
type TLSFiles struct {
	// CA is the CA's certificate.
	CA string
	// ServerCert and ServerKey are the servers' certificate, for the names
	// 127.0.0.1 and localhost, and its key. Servers also present it as
	// clients, on the Cluster bus and replication links.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate, for mutual TLS,
	// and its key.
	ClientCert, ClientKey string
}

// NewTLSFiles generates a CA and the certificates of TLSFiles for t (ECDSA
// P-256, valid from an hour ago for a day). Each call makes a new CA,
// which trusts none of another call's certificates.
func NewTLSFiles(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := TLSFiles{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	if err := f.generate(); err != nil {
		t.Fatalf("redistest: test certificates: %v", err)
	}
	return f
}

// generate writes the files of f.
func (f TLSFiles) generate() error {
	now := time.Now()
	tmpl := func(serial int64, cn string) *x509.Certificate {
		return &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn, Organization: []string{"sluice tests"}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := tmpl(1, "sluice test CA")
	ca.IsCA, ca.BasicConstraintsValid = true, true
	ca.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return err
	}
	server := tmpl(2, "localhost")
	server.DNSNames = []string{"localhost"}
	server.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	server.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	client := tmpl(3, "sluice test client")
	client.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	for _, c := range []struct {
		tmpl              *x509.Certificate
		certFile, keyFile string
	}{{server, f.ServerCert, f.ServerKey}, {client, f.ClientCert, f.ClientKey}} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		c.tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, c.tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(c.certFile, "CERTIFICATE", der); err != nil {
			return err
		}
		if err := writePEM(c.keyFile, "PRIVATE KEY", keyDER); err != nil {
			return err
		}
	}
	return nil
}

// writePEM writes der to path as one PEM block of type typ.
func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// serverArgs returns the redis-server arguments that add a TLS port with
// f's server certificate, trusting f's CA, and asking clients for no
// certificate (extra arguments may say "--tls-auth-clients", "yes").
func (f TLSFiles) serverArgs(tlsPort int) []string {
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
		s, err := launch(path, t.TempDir(), port, configFile, append(files.serverArgs(p[0]), extra...)...)
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
