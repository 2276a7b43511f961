// Package certtest makes throwaway certificates for tests: a CA generated
// in the test, server and client certificates it signs, each with a serial
// number of its own, as PEM bytes or files. Every test that needs TLS
// (sluice's listeners, its clients, Redis over TLS) takes its certificates
// from here; nothing is checked in, and no CA of one call trusts another's.
//
// Keys are ECDSA P-256; certificates are valid from an hour ago for a day.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// NewCA returns a new self-signed CA named name, failing t if it cannot.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("certtest: CA key: %v", err)
	}
	tmpl := template(t, name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("certtest: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("certtest: CA certificate: %v", err)
	}
	return &CA{cert: cert, key: key, pem: encode("CERTIFICATE", der)}
}

// PEM returns the CA's certificate in PEM.
func (ca *CA) PEM() []byte { return ca.pem }

// Pool returns a pool holding the CA's certificate alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// WriteCA writes the CA's certificate in PEM to path, failing t if it
// cannot.
func (ca *CA) WriteCA(t testing.TB, path string) {
	t.Helper()
	writeFile(t, path, ca.pem)
}

// ClientConfig returns the TLS configuration of a client that trusts ca
// alone and presents pair (nil: no certificate). It presents pair whatever
// CAs the server names: crypto/tls alone sends no certificate of a CA the
// server does not name, and the server's own verification of a
// stranger's certificate would go untried.
func (ca *CA) ClientConfig(t testing.TB, pair *Pair) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: ca.Pool()}
	if pair != nil {
		cert := pair.TLS(t)
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return c
}

// Refused reports whether err is a client's error of a handshake that
// the server refused with the TLS alert named alert ("certificate
// required", "unknown certificate authority"), or of the connection the
// server closed on refusing it. Under TLS 1.3 the client's handshake is
// over before the server has checked its certificate: its first write or
// read after it gets the alert, or, when the server's close wins the
// race, a broken pipe or a reset.
func Refused(err error, alert string) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "tls: "+alert) || strings.Contains(s, "broken pipe") || strings.Contains(s, "connection reset by peer")
}

// Server returns a server certificate for 127.0.0.1, ::1 and localhost,
// usable by a client too (as Redis servers present theirs on the Cluster
// bus and replication links).
func (ca *CA) Server(t testing.TB) *Pair {
	t.Helper()
	return ca.sign(t, serverTemplate(t))
}

// serverTemplate is the template of Server's certificates.
func serverTemplate(t testing.TB) *x509.Certificate {
	t.Helper()
	tmpl := template(t, "localhost")
	tmpl.DNSNames = []string{"localhost"}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	return tmpl
}

// Sign returns a server certificate as Server does, changed by edit
// before it is signed: expired, say.
func (ca *CA) Sign(t testing.TB, edit func(*x509.Certificate)) *Pair {
	t.Helper()
	tmpl := serverTemplate(t)
	edit(tmpl)
	return ca.sign(t, tmpl)
}

// Client returns a client certificate, for mutual TLS, whose subject's
// common name is name.
func (ca *CA) Client(t testing.TB, name string) *Pair {
	t.Helper()
	tmpl := template(t, name)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.sign(t, tmpl)
}

// sign returns the certificate of tmpl signed by ca, with a new key.
func (ca *CA) sign(t testing.TB, tmpl *x509.Certificate) *Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("certtest: key: %v", err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("certtest: certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("certtest: certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("certtest: key: %v", err)
	}
	return &Pair{Cert: cert, CertPEM: encode("CERTIFICATE", der), KeyPEM: encode("PRIVATE KEY", keyDER)}
}

// Pair is a certificate and its private key.
type Pair struct {
	// Cert is the certificate, parsed: its SerialNumber tells one pair
	// from another in a handshake.
	Cert *x509.Certificate
	// CertPEM and KeyPEM are the certificate and its PKCS #8 key in PEM.
	CertPEM, KeyPEM []byte
}

// TLS returns the pair as crypto/tls takes it, failing t if it cannot.
func (p *Pair) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatalf("certtest: %v", err)
	}
	return c
}

// Write writes the certificate to certPath and the key to keyPath, each
// replaced whole by a rename (as a certificate manager, or the kubelet,
// does), failing t if it cannot.
func (p *Pair) Write(t testing.TB, certPath, keyPath string) {
	t.Helper()
	writeFile(t, certPath, p.CertPEM)
	writeFile(t, keyPath, p.KeyPEM)
}

// Files are the PEM files of a throwaway PKI, in a temporary directory of
// their own: a CA, a server certificate and a client certificate it
// signed.
type Files struct {
	// CA is the CA's certificate.
	CA string
	// ServerCert and ServerKey are the server certificate (see
	// CA.Server) and its key.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate, for mutual TLS,
	// and its key.
	ClientCert, ClientKey string
}

// NewFiles makes a new CA and the certificates of Files for t, and
// writes them in a temporary directory that is removed when t ends.
func NewFiles(t testing.TB) Files {
	t.Helper()
	files, _ := NewFilesOf(t)
	return files
}

// NewFilesOf is NewFiles, also returning the CA, which signs more
// certificates: a rotated server certificate, another client.
func NewFilesOf(t testing.TB) (Files, *CA) {
	t.Helper()
	dir := t.TempDir()
	f := Files{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	ca := NewCA(t, "sluice test CA")
	ca.WriteCA(t, f.CA)
	ca.Server(t).Write(t, f.ServerCert, f.ServerKey)
	ca.Client(t, "sluice test client").Write(t, f.ClientCert, f.ClientKey)
	return f, ca
}

// template returns a certificate template for name with a random 128-bit
// serial number.
func template(t testing.TB, name string) *x509.Certificate {
	t.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		t.Fatalf("certtest: serial: %v", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"sluice tests"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
	}
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// writeFile replaces the file at path with data, through a temporary file
// in the same directory renamed over it.
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".certtest-*")
	if err != nil {
		t.Fatalf("certtest: %v", err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		t.Fatalf("certtest: write %s: %v", path, err)
	}
}
