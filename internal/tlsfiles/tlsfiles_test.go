package tlsfiles_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testing/certtest"
	"github.com/sluice-go/sluice/internal/tlsfiles"
)

// echo serves cfg on a loopback listener until t ends: each connection's
// handshake, then its bytes echoed back. It returns the address.
func echo(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// dial opens a TLS connection to addr with cfg and checks it by a round
// trip (under TLS 1.3 a refused client certificate is told after the
// client's handshake, at its first read). It returns the connection, open,
// and the serial number of the server's certificate.
func dial(addr string, cfg *tls.Config) (*tls.Conn, string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, "", err
	}
	if err := roundTrip(c); err != nil {
		c.Close()
		return nil, "", err
	}
	return c, c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// served returns the serial number of the certificate a new connection
// to addr with cfg is served, the connection closed.
func served(addr string, cfg *tls.Config) (string, error) {
	c, serial, err := dial(addr, cfg)
	if err != nil {
		return "", err
	}
	c.Close()
	return serial, nil
}

// roundTrip sends a line over c and reads it back.
func roundTrip(c *tls.Conn) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != "ping\n" {
		return fmt.Errorf("echoed %q", b)
	}
	return nil
}

// client returns the config of a client trusting ca and presenting pair
// (nil: none).
func client(ca *certtest.CA, pair *certtest.Pair, t *testing.T) *tls.Config {
	return ca.ClientConfig(t, pair)
}

func serial(p *certtest.Pair) string { return p.Cert.SerialNumber.String() }

// pki is a CA's server certificate and a client's, as files in a
// directory of their own.
type pki struct {
	ca         *certtest.CA
	files      tlsfiles.Files
	server     *certtest.Pair
	clientPair *certtest.Pair
}

func newPKI(t *testing.T, mutual bool) *pki {
	dir := t.TempDir()
	p := &pki{ca: certtest.NewCA(t, "test CA")}
	p.files = tlsfiles.Files{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	p.server = p.ca.Server(t)
	p.server.Write(t, p.files.Cert, p.files.Key)
	p.clientPair = p.ca.Client(t, "client")
	if mutual {
		p.files.ClientCA = filepath.Join(dir, "client-ca.pem")
		p.ca.WriteCA(t, p.files.ClientCA)
	}
	return p
}

// newServer returns the Server of p's files, failing t if it cannot.
func (p *pki) newServer(t *testing.T) *tlsfiles.Server {
	t.Helper()
	s, err := tlsfiles.NewServer(p.files)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestServerHandshake(t *testing.T) {
	p := newPKI(t, false)
	s := p.newServer(t)
	addr := echo(t, s.Config("h2"))
	c, got, err := dial(addr, client(p.ca, nil, t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got != serial(p.server) {
		t.Errorf("served serial %s, want %s", got, serial(p.server))
	}
	if st := c.ConnectionState(); st.Version < tlsfiles.MinVersion {
		t.Errorf("TLS version %x, want at least %x", st.Version, tlsfiles.MinVersion)
	}
	// The control: a client of another CA cannot verify the server.
	other := certtest.NewCA(t, "other CA")
	if _, err := served(addr, client(other, nil, t)); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("a client trusting another CA: %v, want certificate signed by unknown authority", err)
	}
	if s.Mutual() {
		t.Error("Mutual() without ClientCA")
	}
}

func TestServerMutual(t *testing.T) {
	p := newPKI(t, true)
	s := p.newServer(t)
	if !s.Mutual() {
		t.Error("Mutual() false with ClientCA")
	}
	addr := echo(t, s.Config())
	other := certtest.NewCA(t, "other CA")
	for _, tc := range []struct {
		name string
		cert *certtest.Pair
		want string // "" for accepted
	}{
		{"a client certificate of the CA", p.clientPair, ""},
		{"no client certificate", nil, "certificate required"},
		{"a client certificate of another CA", other.Client(t, "stranger"), "unknown certificate authority"},
	} {
		_, err := served(addr, client(p.ca, tc.cert, t))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.want != "" && !certtest.Refused(err, tc.want):
			t.Errorf("%s: %v, want refused: %s", tc.name, err, tc.want)
		}
	}
}

// TestServerReload: new handshakes see a rotated certificate while a
// connection opened before keeps working, and files that are not valid
// keep the previous certificate serving.
func TestServerReload(t *testing.T) {
	p := newPKI(t, false)
	s := p.newServer(t)
	addr := echo(t, s.Config())
	old, got, err := dial(addr, client(p.ca, nil, t))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got != serial(p.server) {
		t.Fatalf("served serial %s, want %s", got, serial(p.server))
	}
	rotated := p.ca.Server(t)
	if serial(rotated) == serial(p.server) {
		t.Fatal("the rotated certificate has the old serial: the test could not tell them apart")
	}
	rotated.Write(t, p.files.Cert, p.files.Key)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	got, err = served(addr, client(p.ca, nil, t))
	if err != nil {
		t.Fatal(err)
	}
	if got != serial(rotated) {
		t.Errorf("after the rotation: serial %s, want the new %s", got, serial(rotated))
	}
	if err := roundTrip(old); err != nil {
		t.Errorf("the connection opened before the rotation: %v", err)
	}
	// A new certificate with the old key: refused, the rotated pair serves on.
	if err := os.WriteFile(p.files.Cert, p.ca.Server(t).CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "private key does not match public key") {
		t.Errorf("Reload of a certificate with another's key: %v, want a mismatch", err)
	}
	if got, err := served(addr, client(p.ca, nil, t)); err != nil || got != serial(rotated) {
		t.Errorf("after a rejected reload: serial %s (%v), want the previous %s", got, err, serial(rotated))
	}
}

// TestServerWatch: a change of the files is reloaded by the watch; files
// that are not valid are logged at Warn and the previous certificate
// serves; the client CA is reloaded too.
func TestServerWatch(t *testing.T) {
	p := newPKI(t, true)
	s := p.newServer(t)
	logs := newLogFile(t)
	log := slog.New(slog.NewTextHandler(logs.f, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Watch(ctx, 10*time.Millisecond, nil, log)
	addr := echo(t, s.Config())

	rotated := p.ca.Server(t)
	rotated.Write(t, p.files.Cert, p.files.Key)
	waitServed(t, addr, client(p.ca, p.clientPair, t), serial(rotated))
	waitLogged(t, logs, "TLS files reloaded")

	// Not PEM: rejected, logged, and the rotated pair keeps serving.
	if err := os.WriteFile(p.files.Key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// (A rotation written one file at a time may have been caught
	// between the two, and warned of too: this warning is the one that
	// says what is wrong now.)
	why := "--tls-key " + p.files.Key + " holds no PEM private key"
	waitLogged(t, logs, why)
	if line := lineOf(logs.String(), why); !strings.Contains(line, `level=WARN msg="TLS files rejected: the previous certificate keeps serving"`) {
		t.Errorf("the rejection is logged as %q, want a warning that the previous certificate serves", line)
	}
	if got, err := served(addr, client(p.ca, p.clientPair, t)); err != nil || got != serial(rotated) {
		t.Errorf("after invalid files: serial %s (%v), want the previous %s", got, err, serial(rotated))
	}

	// A new CA for clients (and the server): the old CA's client is
	// refused, the new one's accepted.
	next := certtest.NewCA(t, "next CA")
	next.WriteCA(t, p.files.ClientCA)
	nextServer := next.Server(t)
	nextServer.Write(t, p.files.Cert, p.files.Key)
	waitServed(t, addr, client(next, next.Client(t, "new client"), t), serial(nextServer))
	if _, err := served(addr, client(next, p.clientPair, t)); !certtest.Refused(err, "unknown certificate authority") {
		t.Errorf("a client of the previous CA after the CA's rotation: %v, want refused", err)
	}
}

// waitServed dials addr with cfg until the server's certificate has
// serial want, failing t after 10s.
func waitServed(t *testing.T, addr string, cfg *tls.Config, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := served(addr, cfg)
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("serial %s (%v) after 10s, want %s", got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lineOf returns the line of text holding s.
func lineOf(text, s string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// waitLogged waits up to 10s for logs to hold s.
func waitLogged(t *testing.T, logs *logFile, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged within 10s:\n%s", s, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logFile is a log written to a file, which concurrent writes keep
// whole, and read back as it is.
type logFile struct{ f *os.File }

func newLogFile(t *testing.T) *logFile {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &logFile{f}
}

func (l *logFile) String() string {
	b, _ := os.ReadFile(l.f.Name())
	return string(b)
}

// TestNewServerErrors: each error names the flag and the file at fault.
func TestNewServerErrors(t *testing.T) {
	p := newPKI(t, false)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	missing := filepath.Join(dir, "missing.pem")
	otherKey := write("other-key.pem", p.ca.Server(t).KeyPEM)
	empty := write("empty.pem", nil)
	expired := expiredPair(t, p.ca)
	expiredCert, expiredKey := write("expired.pem", expired.CertPEM), write("expired-key.pem", expired.KeyPEM)
	for _, tc := range []struct {
		name  string
		files tlsfiles.Files
		want  []string
	}{
		{"certificate without key", tlsfiles.Files{Cert: p.files.Cert}, []string{"--tls-cert needs --tls-key"}},
		{"key without certificate", tlsfiles.Files{Key: p.files.Key}, []string{"--tls-key needs --tls-cert"}},
		{"client CA alone", tlsfiles.Files{ClientCA: p.files.Cert}, []string{"--tls-client-ca needs --tls-cert and --tls-key"}},
		{"missing certificate file", tlsfiles.Files{Cert: missing, Key: p.files.Key}, []string{"--tls-cert " + missing + ": no such file or directory"}},
		{"missing key file", tlsfiles.Files{Cert: p.files.Cert, Key: missing}, []string{"--tls-key " + missing + ": no such file or directory"}},
		{"missing client CA file", tlsfiles.Files{Cert: p.files.Cert, Key: p.files.Key, ClientCA: missing}, []string{"--tls-client-ca " + missing + ": no such file or directory"}},
		{"key not the certificate's", tlsfiles.Files{Cert: p.files.Cert, Key: otherKey}, []string{"--tls-cert " + p.files.Cert + " and --tls-key " + otherKey, "private key does not match public key"}},
		{"files swapped", tlsfiles.Files{Cert: p.files.Key, Key: p.files.Cert}, []string{"--tls-cert " + p.files.Key + " holds a private key and no certificate", "other way round"}},
		{"key file holds a certificate", tlsfiles.Files{Cert: p.files.Cert, Key: p.files.Cert}, []string{"--tls-key " + p.files.Cert + " holds a certificate and no private key"}},
		{"empty certificate file", tlsfiles.Files{Cert: empty, Key: p.files.Key}, []string{"--tls-cert " + empty + " holds no PEM certificate"}},
		{"no certificate in the client CA file", tlsfiles.Files{Cert: p.files.Cert, Key: p.files.Key, ClientCA: p.files.Key}, []string{"--tls-client-ca " + p.files.Key + " holds no PEM certificate", "no client certificate could be verified"}},
		{"expired certificate", tlsfiles.Files{Cert: expiredCert, Key: expiredKey}, []string{"--tls-cert " + expiredCert + ": the certificate expired at "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tlsfiles.NewServer(tc.files)
			if err == nil {
				t.Fatalf("NewServer(%+v) = %v, nil; want an error", tc.files, s)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// The control: the same files, valid, load.
	if _, err := tlsfiles.NewServer(p.files); err != nil {
		t.Errorf("valid files: %v", err)
	}
}

// expiredPair returns a certificate of ca that expired an hour ago.
func expiredPair(t *testing.T, ca *certtest.CA) *certtest.Pair {
	t.Helper()
	return ca.Sign(t, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	})
}

func TestClientConfig(t *testing.T) {
	p := newPKI(t, true)
	s := p.newServer(t)
	addr := echo(t, s.Config())
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	p.ca.WriteCA(t, caFile)
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	p.clientPair.Write(t, certFile, keyFile)

	c, err := tlsfiles.ClientConfig(tlsfiles.ClientFiles{CA: caFile, Cert: certFile, Key: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	c.ServerName = "127.0.0.1"
	if _, err := served(addr, c); err != nil {
		t.Fatalf("a client of ClientConfig: %v", err)
	}
	// Without the client certificate the server refuses it: the
	// certificate above is what let it in.
	c, err = tlsfiles.ClientConfig(tlsfiles.ClientFiles{CA: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := served(addr, c); err == nil {
		t.Error("a client without its certificate was let in")
	}

	for _, tc := range []struct {
		files tlsfiles.ClientFiles
		want  string
	}{
		{tlsfiles.ClientFiles{Cert: certFile}, "--tls-cert needs --tls-key"},
		{tlsfiles.ClientFiles{Key: keyFile}, "--tls-key needs --tls-cert"},
		{tlsfiles.ClientFiles{CA: keyFile}, "--tls-ca " + keyFile + " holds no PEM certificate (-----BEGIN CERTIFICATE-----): no server certificate could be verified"},
		{tlsfiles.ClientFiles{CA: filepath.Join(dir, "nope")}, "--tls-ca " + filepath.Join(dir, "nope") + ": no such file or directory"},
	} {
		if _, err := tlsfiles.ClientConfig(tc.files); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ClientConfig(%+v): %v, want %q", tc.files, err, tc.want)
		}
	}
	if _, err := tlsfiles.ClientConfig(tlsfiles.ClientFiles{}); err != nil {
		t.Errorf("ClientConfig of no files (the system's CAs): %v", err)
	}
	// A missing file's path is said once, with its flag, and the
	// error is still the file system's.
	nope := filepath.Join(dir, "nope")
	_, err = tlsfiles.ClientConfig(tlsfiles.ClientFiles{CA: nope})
	if n := strings.Count(fmt.Sprint(err), nope); n != 1 || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing CA file: %v (path said %d times), want it once and os.ErrNotExist", err, n)
	}
}
