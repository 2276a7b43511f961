package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/internal/tlsfiles"
)

// TLS of serve's and proxy's listeners: one certificate, and with
// --tls-client-ca one set of trusted client CAs, for every listener of the
// process (serve's --listen, --grpc-listen, --dashboard-listen and
// --pprof-listen; proxy's --listen and --metrics-listen), reloaded when
// the files change. The dashboard has no TLS flags of its own: it and
// the operator API are the doors that show most, and the last that
// should be left in the clear, or without client certificates, when the
// decision service is not.

// tlsFlags are the TLS flags of serve and proxy.
type tlsFlags struct{ cert, key, clientCA *string }

// addTLSFlags defines them on fs.
func addTLSFlags(fs *cmdFlags) *tlsFlags {
	return &tlsFlags{
		cert: fs.string(tlsfiles.CertFlag, "SLUICE_TLS_CERT", "",
			"PEM certificate chain, leaf first, that every listener serves: TLS only, with --tls-key (as envoyproxy/ratelimit's GRPC_SERVER_TLS_CERT, for every listener); reloaded when the file changes, the previous pair serving while the new files are not valid (empty: no TLS)"),
		key: fs.string(tlsfiles.KeyFlag, "SLUICE_TLS_KEY", "",
			"PEM private key of --tls-cert (as envoyproxy/ratelimit's GRPC_SERVER_TLS_KEY)"),
		clientCA: fs.string(tlsfiles.ClientCAFlag, "SLUICE_TLS_CLIENT_CA", "",
			"PEM bundle of CA certificates: every listener then requires and verifies a client certificate that one of them signed, refusing a client without one in the handshake (mutual TLS, as envoyproxy/ratelimit's GRPC_CLIENT_TLS_CACERT); reloaded with --tls-cert (empty: no client certificate asked)"),
	}
}

// open loads the files the flags name and watches them until ctx ends
// (polled every interval, and on SIGHUP), and returns the process's
// listeners: over TLS when the flags name files, in the clear otherwise.
// stop ends the watch and its SIGHUP subscription.
func (f *tlsFlags) open(ctx context.Context, interval time.Duration, log *slog.Logger) (ls *listeners, stop func(), err error) {
	files := tlsfiles.Files{Cert: *f.cert, Key: *f.key, ClientCA: *f.clientCA}
	if !files.On() {
		return &listeners{}, func() {}, nil
	}
	if err := files.Check(); err != nil {
		return nil, nil, usageError{err}
	}
	s, err := tlsfiles.NewServer(files)
	if err != nil {
		return nil, nil, err
	}
	// A subscription of its own: every SIGHUP reaches the policy's
	// watch and this one.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	s.Watch(ctx, interval, hup, log)
	return &listeners{tls: s}, func() { cancel(); signal.Stop(hup) }, nil
}

// listeners opens the listeners of one process: each over TLS, with the
// same certificate and client CAs, when tls is set.
type listeners struct {
	tls *tlsfiles.Server // nil: in the clear
}

// listen listens for HTTP/1.1 on addr, the value of flag.
func (l *listeners) listen(flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if l.tls != nil {
		// HTTP/1.1 only, as in the clear: the listener bounds (idle,
		// body and in-flight) are a connection's.
		ln = tls.NewListener(ln, l.tls.Config("http/1.1"))
	}
	return ln, nil
}

// grpcOptions returns the gRPC server's transport credentials, when the
// process serves TLS.
func (l *listeners) grpcOptions() []grpc.ServerOption {
	if l.tls == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(l.tls.Config("h2")))}
}

// attrs returns the start log's attributes of the listeners' TLS: off,
// on, or mutual (client certificates required), and the certificate.
func (l *listeners) attrs() []any {
	switch {
	case l.tls == nil:
		return []any{"tls", "off"}
	case l.tls.Mutual():
		return append([]any{"tls", "mutual"}, l.tls.LogAttrs()...)
	}
	return append([]any{"tls", "on"}, l.tls.LogAttrs()...)
}

// serveAside serves h on a listener of its own at addr, the value of
// flag, and returns how to stop it and the address it listens on.
func (l *listeners) serveAside(flag, addr string, h http.Handler, log *slog.Logger) (stop func(), bound string, err error) {
	ln, err := l.listen(flag, addr)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: defaultHeaderTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, ln.Addr().String(), nil
}

// clientTLSFlags are a client command's flags of its TLS to sluice (bench
// and the operator commands).
type clientTLSFlags struct{ ca, cert, key *string }

// addClientTLSFlags defines them on fs, each variable named envPrefix
// and the flag's (SLUICE_BENCH_TLS_CA).
func addClientTLSFlags(fs *cmdFlags, envPrefix string) *clientTLSFlags {
	return &clientTLSFlags{
		ca: fs.string(tlsfiles.CAFlag, envPrefix+"TLS_CA", "",
			"PEM bundle of the CA certificates to verify sluice serve's certificate against, over TLS (empty: the system's)"),
		cert: fs.string(tlsfiles.CertFlag, envPrefix+"TLS_CERT", "",
			"PEM client certificate to present over TLS, with --tls-key, to a sluice serve run with --tls-client-ca"),
		key: fs.string(tlsfiles.KeyFlag, envPrefix+"TLS_KEY", "",
			"PEM private key of --tls-cert"),
	}
}

// files returns the files the flags name.
func (f *clientTLSFlags) files() tlsfiles.ClientFiles {
	return tlsfiles.ClientFiles{CA: *f.ca, Cert: *f.cert, Key: *f.key}
}

// given returns the flags given, as "--tls-ca, --tls-cert".
func (f *clientTLSFlags) given() string {
	var out []string
	for _, fl := range []struct{ name, v string }{{tlsfiles.CAFlag, *f.ca}, {tlsfiles.CertFlag, *f.cert}, {tlsfiles.KeyFlag, *f.key}} {
		if fl.v != "" {
			out = append(out, "--"+fl.name)
		}
	}
	return strings.Join(out, ", ")
}

// config returns the TLS of a client of the base URL raw, the value of
// flag: nil for a URL that is not https, with which the flags given would
// be ignored, and so are a usage error.
func (f *clientTLSFlags) config(flag, raw string) (*tls.Config, error) {
	if u, err := url.Parse(raw); err != nil || u.Scheme != "https" {
		if f.files().On() {
			return nil, usageError{fmt.Errorf("%s: only for an https:// %s", f.given(), flag)}
		}
		return nil, nil
	}
	c, err := tlsfiles.ClientConfig(f.files())
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// grpcCredentials returns the credentials of a gRPC client: TLS when any
// of the flags is given, none otherwise.
func (f *clientTLSFlags) grpcCredentials() (credentials.TransportCredentials, error) {
	if !f.files().On() {
		return insecure.NewCredentials(), nil
	}
	c, err := tlsfiles.ClientConfig(f.files())
	if err != nil {
		return nil, usageError{err}
	}
	return credentials.NewTLS(c), nil
}
