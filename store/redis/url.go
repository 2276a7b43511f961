package redis

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	neturl "net/url"
	"os"
	"slices"
	"strings"

	"github.com/redis/rueidis"
)

// The TLS options of a rediss:// URL that the store reads itself
// (rueidis.ParseURL knows only skip_verify).
const (
	// optCAFile names a PEM file of the CA certificates that verify the
	// servers, instead of the system's roots.
	optCAFile = "tls_ca_file"
	// optCertFile and optKeyFile name the PEM files of the client
	// certificate (with its chain) and its private key, for mutual TLS;
	// one needs the other.
	optCertFile = "tls_cert_file"
	optKeyFile  = "tls_key_file"
	// optServerName is the name verified in every server's certificate,
	// and sent as SNI; by default, the host each connection dials.
	optServerName = "tls_server_name"
	// optSkipVerify (rueidis's) disables verification.
	optSkipVerify = "skip_verify"
)

// tlsOptions are the options that configure TLS, which only a rediss://
// URL has.
var tlsOptions = []string{optCAFile, optCertFile, optKeyFile, optServerName, optSkipVerify}

// rueidisOptions are the query options rueidis.ParseURL reads (url.go of
// the rueidis version in go.mod, v1.0.79), skip_verify apart (tlsOptions).
var rueidisOptions = []string{"addr", "client_cache", "client_name", "db", "dial_timeout", "master_set", "max_retries", "protocol", "write_timeout"}

// urlOptions is every query option a URL may have, sorted.
var urlOptions = func() []string {
	o := slices.Concat(rueidisOptions, tlsOptions)
	slices.Sort(o)
	return o
}()

// checkOptions returns an error naming the first option of q (in sorted
// order) that the store does not know, or that q gives more than once
// (addr apart, which lists several servers). rueidis.ParseURL ignores
// both, so that a misspelt or unsupported option (tls_ca_file before it
// existed) silently did nothing.
func checkOptions(q neturl.Values) error {
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(urlOptions, k) {
			return fmt.Errorf("unknown option %q (the options are %s)", k, strings.Join(urlOptions, ", "))
		}
		if n := len(q[k]); n > 1 && k != "addr" {
			return fmt.Errorf("option %s given %d times", k, n)
		}
		if want, ok := optionValues[k]; ok && !slices.Contains(want, q.Get(k)) {
			return fmt.Errorf("option %s is %q, want %s", k, q.Get(k), strings.Join(want, " or "))
		}
	}
	return nil
}

// optionValues are the values of the rueidis options that rueidis.ParseURL
// compares with one value, ignoring any other (protocol=resp2 would
// silently mean RESP3).
var optionValues = map[string][]string{
	"protocol":     {"2", "3"},
	"client_cache": {"0", "1"}, // the store never uses the cache
	"max_retries":  {"0"},      // 0: never retry; rueidis's retries take no count
}

// applyTLS sets up the TLS of opt, which rueidis.ParseURL built from a URL
// whose query is q: it reads the files the TLS options name, and through
// Sentinel it gives the sentinels the same TLS as the primary. A TLS
// option on a URL without TLS is an error, since it would be ignored.
//
// Unless tls_server_name says otherwise, each connection verifies the host
// it dials (rueidis.ParseURL would verify the URL's first host on every
// connection, wrong for the other nodes of a Cluster and for the primary
// that the sentinels name).
func applyTLS(opt *rueidis.ClientOption, q neturl.Values) error {
	if opt.TLSConfig == nil {
		for _, k := range tlsOptions {
			if q.Has(k) {
				return fmt.Errorf("option %s needs TLS, a rediss:// URL", k)
			}
		}
		return nil
	}
	c := opt.TLSConfig
	get := func(k string) (string, error) {
		v := q.Get(k)
		if q.Has(k) && v == "" {
			return "", fmt.Errorf("option %s is empty", k)
		}
		return v, nil
	}
	name, err := get(optServerName)
	if err != nil {
		return err
	}
	c.ServerName = name // "": the host each connection dials
	ca, err := get(optCAFile)
	if err != nil {
		return err
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return fmt.Errorf("option %s: %w", optCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("option %s: %s holds no PEM certificate", optCAFile, ca)
		}
		c.RootCAs = pool
	}
	cert, err := get(optCertFile)
	if err != nil {
		return err
	}
	key, err := get(optKeyFile)
	if err != nil {
		return err
	}
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("options %s and %s: %w", optCertFile, optKeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case cert != "":
		return fmt.Errorf("option %s needs %s, the client certificate's private key", optCertFile, optKeyFile)
	case key != "":
		return fmt.Errorf("option %s needs %s, the client certificate", optKeyFile, optCertFile)
	}
	if opt.Sentinel.MasterSet != "" {
		// rueidis connects to the sentinels with Sentinel's TLSConfig and
		// Dialer, which rueidis.ParseURL leaves empty: the sentinels
		// would be dialed without TLS, and without dial_timeout.
		opt.Sentinel.TLSConfig = c.Clone()
		opt.Sentinel.Dialer = opt.Dialer
	}
	return nil
}
