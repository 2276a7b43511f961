// Package tlsfiles is TLS from PEM files named on sluice's command line.
// A Server loads and checks a listener's certificate, private key and
// client CA bundle, hands every handshake the ones it loaded last, and
// reloads them when the files change, keeping the last good ones while
// the new files are not valid: connections already open carry on, new
// handshakes see the new certificate. ClientConfig loads the files of a
// client's TLS: a CA bundle to verify the server's certificate against,
// and a client certificate for a server that asks for one.
//
// Every error names the flag and the file at fault (CertFlag, KeyFlag,
// ClientCAFlag, CAFlag: the names sluice's commands register).
package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/policyfile"
)

// The names of the flags the files come from, without their dashes: the
// server's (serve and proxy), and a client's (bench, inspect, reset,
// top), which takes CertFlag and KeyFlag for its own certificate.
const (
	CertFlag     = "tls-cert"
	KeyFlag      = "tls-key"
	ClientCAFlag = "tls-client-ca"
	CAFlag       = "tls-ca"
)

// MinVersion is the oldest TLS version either side accepts.
const MinVersion = tls.VersionTLS12

// Files names the PEM files of a TLS server.
type Files struct {
	// Cert is the certificate chain, leaf first, and Key its private key
	// (PKCS #8, PKCS #1 or SEC 1): both, or neither.
	Cert, Key string
	// ClientCA, when set, is a bundle of CA certificates, and every
	// client must present a certificate that one of them signed (mutual
	// TLS); a client without one is refused in the handshake.
	ClientCA string
}

// On reports whether f names any file: whether TLS is asked for.
func (f Files) On() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// Check says what is missing from f, which NewServer would refuse: a
// certificate without its key, a key without its certificate, client CAs
// without either.
func (f Files) Check() error {
	switch {
	case f.Cert == "" && f.Key != "":
		return fmt.Errorf("--%s needs --%s, the certificate of the key", KeyFlag, CertFlag)
	case f.Cert != "" && f.Key == "":
		return fmt.Errorf("--%s needs --%s, the certificate's private key", CertFlag, KeyFlag)
	case f.Cert == "" && f.ClientCA != "":
		return fmt.Errorf("--%s needs --%s and --%s: client certificates are asked for over TLS only", ClientCAFlag, CertFlag, KeyFlag)
	}
	return nil
}

// list returns the files f names, for the watch.
func (f Files) list() ([]string, error) {
	var out []string
	for _, p := range []string{f.Cert, f.Key, f.ClientCA} {
		if p != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

// Server is the TLS of a process's listeners, served from Files. It is
// safe for concurrent use.
type Server struct {
	files Files
	since policyfile.Version // the files as they were before the first load
	cur   atomic.Pointer[loaded]
}

// loaded is one valid version of the files.
type loaded struct {
	config *tls.Config       // its Certificates, and ClientCAs and ClientAuth for mutual TLS
	leaf   *x509.Certificate // the certificate served
}

// NewServer loads f, or returns an error that names the flag and the file
// at fault: a missing or unreadable file, a certificate without its key
// (or the other way round), a key that is not the certificate's, an
// expired certificate, a client CA bundle without a certificate.
func NewServer(f Files) (*Server, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	s := &Server{files: f, since: policyfile.VersionOf(f.list)}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Mutual reports whether clients must present a certificate.
func (s *Server) Mutual() bool { return s.files.ClientCA != "" }

// Leaf returns the certificate that handshakes are served now.
func (s *Server) Leaf() *x509.Certificate { return s.cur.Load().leaf }

// Config returns the TLS configuration of one listener, which offers
// protos by ALPN (such as "http/1.1", or "h2" for gRPC): each handshake
// gets the certificate and client CAs loaded last.
func (s *Server) Config(protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := s.cur.Load().config.Clone()
			c.NextProtos = protos
			return c, nil
		},
	}
}

// Reload reads the files again. When they are valid, new handshakes get
// them; otherwise the previous ones keep serving, and the error says what
// is wrong.
func (s *Server) Reload() error {
	pair, err := loadPair(s.files.Cert, s.files.Key)
	if err != nil {
		return err
	}
	if now := time.Now(); now.After(pair.Leaf.NotAfter) {
		return fmt.Errorf("--%s %s: the certificate expired at %s", CertFlag, s.files.Cert, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	c := &tls.Config{MinVersion: MinVersion, Certificates: []tls.Certificate{pair}}
	if s.files.ClientCA != "" {
		if c.ClientCAs, err = loadPool(ClientCAFlag, s.files.ClientCA, "no client certificate could be verified"); err != nil {
			return err
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	s.cur.Store(&loaded{config: c, leaf: pair.Leaf})
	return nil
}

// Watch reloads the files on every signal from hup and whenever their
// content changes (polled every interval, as policyfile.WatchFiles polls
// a policy; 0: on hup only), from the version they had before NewServer
// loaded them, until ctx ends. Each reload is logged: at Info with the
// certificate now served, or at Warn with the error when the new files
// are rejected and the previous ones keep serving.
func (s *Server) Watch(ctx context.Context, interval time.Duration, hup <-chan os.Signal, log *slog.Logger) {
	policyfile.WatchFiles(ctx, s.files.list, s.since, interval, hup, func(trigger string) {
		if err := s.Reload(); err != nil {
			log.Warn("TLS files rejected: the previous certificate keeps serving", "trigger", trigger, "error", err)
			return
		}
		log.Info("TLS files reloaded", append([]any{"trigger", trigger}, s.LogAttrs()...)...)
	})
}

// LogAttrs returns the log attributes of the certificate served now: its
// serial number (in hexadecimal, as openssl x509 -serial prints it), its
// subject and when it expires.
func (s *Server) LogAttrs() []any {
	leaf := s.Leaf()
	return []any{"tls_serial", fmt.Sprintf("%X", leaf.SerialNumber), "tls_subject", leaf.Subject.String(),
		"tls_not_after", leaf.NotAfter.UTC().Format(time.RFC3339)}
}

// ClientFiles names the PEM files of a client's TLS.
type ClientFiles struct {
	// CA is a bundle of CA certificates to verify the server's
	// certificate against (empty: the system's).
	CA string
	// Cert and Key are a client certificate and its private key, for a
	// server that asks for one (mutual TLS): both, or neither.
	Cert, Key string
}

// On reports whether f names any file.
func (f ClientFiles) On() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// ClientConfig returns the TLS configuration of a client of f's files, or
// an error that names the flag and the file at fault.
func ClientConfig(f ClientFiles) (*tls.Config, error) {
	c := &tls.Config{MinVersion: MinVersion}
	var err error
	if f.CA != "" {
		if c.RootCAs, err = loadPool(CAFlag, f.CA, "no server certificate could be verified"); err != nil {
			return nil, err
		}
	}
	switch {
	case f.Cert == "" && f.Key != "":
		return nil, fmt.Errorf("--%s needs --%s, the client certificate of the key", KeyFlag, CertFlag)
	case f.Cert != "" && f.Key == "":
		return nil, fmt.Errorf("--%s needs --%s, the client certificate's private key", CertFlag, KeyFlag)
	case f.Cert != "":
		pair, err := loadPair(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// loadPair loads the certificate chain at certPath and its key at
// keyPath.
func loadPair(certPath, keyPath string) (tls.Certificate, error) {
	certPEM, err := readFile(CertFlag, certPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readFile(KeyFlag, keyPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	swapped := fmt.Sprintf("are --%s and --%s the other way round?", CertFlag, KeyFlag)
	certs, keys := blocks(certPEM)
	switch {
	case certs == 0 && keys > 0:
		return tls.Certificate{}, fmt.Errorf("--%s %s holds a private key and no certificate: %s", CertFlag, certPath, swapped)
	case certs == 0:
		return tls.Certificate{}, fmt.Errorf("--%s %s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", CertFlag, certPath)
	}
	certs, keys = blocks(keyPEM)
	switch {
	case keys == 0 && certs > 0:
		return tls.Certificate{}, fmt.Errorf("--%s %s holds a certificate and no private key: %s", KeyFlag, keyPath, swapped)
	case keys == 0:
		return tls.Certificate{}, fmt.Errorf("--%s %s holds no PEM private key (-----BEGIN PRIVATE KEY-----)", KeyFlag, keyPath)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// Chiefly "private key does not match public key".
		return tls.Certificate{}, fmt.Errorf("--%s %s and --%s %s: %w", CertFlag, certPath, KeyFlag, keyPath, err)
	}
	if pair.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("--%s %s: %w", CertFlag, certPath, err)
		}
	}
	return pair, nil
}

// loadPool loads the CA bundle at path, the value of flag; without a
// certificate in it, the error says why (unverifiable).
func loadPool(flag, path, unverifiable string) (*x509.CertPool, error) {
	data, err := readFile(flag, path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--%s %s: certificate %d: %w", flag, path, n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("--%s %s holds no PEM certificate (-----BEGIN CERTIFICATE-----): %s", flag, path, unverifiable)
	}
	return pool, nil
}

// blocks counts the PEM certificates and private keys of data.
func blocks(data []byte) (certs, keys int) {
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return certs, keys
		}
		switch {
		case b.Type == "CERTIFICATE":
			certs++
		case strings.HasSuffix(b.Type, "PRIVATE KEY"):
			keys++
		}
	}
}

// readFile reads the file at path, the value of flag.
func readFile(flag, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once, with its flag
		}
		return nil, fmt.Errorf("--%s %s: %w", flag, path, err)
	}
	return data, nil
}
