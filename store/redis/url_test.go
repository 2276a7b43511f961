//go:build integration

package redis_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// TestURLErrorHidesPassword: a URL that does not parse is reported, by
// Open and CheckURL alike, without the password it holds.
func TestURLErrorHidesPassword(t *testing.T) {
	const secret = "s3cret"
	for _, url := range []string{
		"redis://user:" + secret + "@host:bad port/0",
		"redis://user:" + secret + "@host:6379/notadb",
		"redis://user:" + secret + "%zz@host:6379",
		"redis://user:" + secret + "@host:6379?" + secret + "=1",
		"redis://user:" + secret + "@host:6379?tls_ca_file=/ca.pem",
		"rediss://user:" + secret + "@host:6379?tls_ca_file=/nonexistent/ca.pem",
		"rediss://user:" + secret + "@host:6379?db=1&q=%zz",
	} {
		s, err := redis.Open(url)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want a parse error", url)
		} else if strings.Contains(err.Error(), secret+"@") || strings.Contains(err.Error(), "user:") {
			t.Errorf("Open: error quotes the URL: %v", err)
		}
		err = redis.CheckURL(url)
		if err == nil {
			t.Errorf("CheckURL(%q) = nil, want a parse error", url)
		} else if strings.Contains(err.Error(), secret+"@") || strings.Contains(err.Error(), "user:") {
			t.Errorf("CheckURL: error quotes the URL: %v", err)
		}
	}
}

// TestURLOptions: every option the store or rueidis reads is accepted,
// and every mistake is an error that names the option and what is wrong,
// the same from CheckURL as from Open (which fails before connecting).
func TestURLOptions(t *testing.T) {
	pki := redistest.NewTLSFiles(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsQuery := "tls_ca_file=" + pki.CA + "&tls_cert_file=" + pki.ClientCert + "&tls_key_file=" + pki.ClientKey
	for _, tc := range []struct {
		url  string
		want []string // substrings of the error; nil: valid
	}{
		{"redis://h:1?addr=h:2&addr=h:3&client_cache=0&client_name=n&db=2&dial_timeout=1s&max_retries=0&protocol=2&write_timeout=1s", nil},
		{"redis://h:1?master_set=m&protocol=3&client_cache=1", nil},
		{"rediss://h:1?skip_verify=true", nil},
		{"rediss://h:1?" + tlsQuery + "&tls_server_name=redis.example", nil},
		{"rediss://h:1?master_set=m&" + tlsQuery, nil},
		{"unix:///tmp/redis.sock", nil},

		{"redis://h:1?tls_ca=/ca.pem", []string{`unknown option "tls_ca"`, "the options are addr, client_cache, ", "tls_ca_file", "write_timeout"}},
		{"redis://h:1?pasword=x", []string{`unknown option "pasword"`}},
		{"redis://h:1?db=1&db=2", []string{"option db given 2 times"}},
		{"rediss://h:1?tls_ca_file=" + pki.CA + "&tls_ca_file=" + pki.CA, []string{"option tls_ca_file given 2 times"}},
		{"redis://h:1?tls_ca_file=" + pki.CA, []string{"option tls_ca_file needs TLS, a rediss:// URL"}},
		{"redis://h:1?skip_verify=true", []string{"option skip_verify needs TLS"}},
		{"unix:///tmp/redis.sock?tls_server_name=x", []string{"option tls_server_name needs TLS"}},
		{"rediss://h:1?tls_ca_file=", []string{"option tls_ca_file is empty"}},
		{"rediss://h:1?tls_server_name=", []string{"option tls_server_name is empty"}},
		{"rediss://h:1?tls_ca_file=/nonexistent/ca.pem", []string{"option tls_ca_file:", "/nonexistent/ca.pem", "no such file"}},
		{"rediss://h:1?tls_ca_file=" + notPEM, []string{"option tls_ca_file:", notPEM, "holds no PEM certificate"}},
		{"rediss://h:1?tls_cert_file=" + pki.ClientCert, []string{"option tls_cert_file needs tls_key_file"}},
		{"rediss://h:1?tls_key_file=" + pki.ClientKey, []string{"option tls_key_file needs tls_cert_file"}},
		{"rediss://h:1?tls_cert_file=" + pki.ClientCert + "&tls_key_file=" + pki.ServerKey, []string{"options tls_cert_file and tls_key_file:", "private key does not match public key"}},
		{"rediss://h:1?tls_cert_file=" + notPEM + "&tls_key_file=" + pki.ClientKey, []string{"options tls_cert_file and tls_key_file:"}},
		{"rediss://h:1?skip_verify=maybe", []string{"invalid skip verify"}},
		{"redis://h:1?protocol=resp2", []string{`option protocol is "resp2", want 2 or 3`}},
		{"redis://h:1?client_cache=", []string{`option client_cache is "", want 0 or 1`}},
		{"redis://h:1?max_retries=3", []string{`option max_retries is "3", want 0`}},
	} {
		err := redis.CheckURL(tc.url)
		if tc.want == nil {
			if err != nil {
				t.Errorf("CheckURL(%q) = %v, want nil", tc.url, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("CheckURL(%q) = nil, want an error with %q", tc.url, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CheckURL(%q) = %v, want it to say %q", tc.url, err, w)
			}
		}
		s, oerr := redis.Open(tc.url)
		if oerr == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want %v", tc.url, err)
		} else if !strings.Contains(oerr.Error(), err.Error()) {
			t.Errorf("Open(%q) = %v, want the error of CheckURL, %v", tc.url, oerr, err)
		}
	}
}

// TestURLTLSConfig: the TLS options reach the TLS configuration of the
// connections to the servers, and through Sentinel that of the
// connections to the sentinels too; without tls_server_name each
// connection verifies the host it dials.
func TestURLTLSConfig(t *testing.T) {
	pki := redistest.NewTLSFiles(t)
	q := "tls_ca_file=" + pki.CA + "&tls_cert_file=" + pki.ClientCert + "&tls_key_file=" + pki.ClientKey
	opt, err := redis.ParseURL("rediss://h:1?dial_timeout=3s&master_set=m&tls_server_name=redis.example&" + q)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*tls.Config{"servers": opt.TLSConfig, "sentinels": opt.Sentinel.TLSConfig} {
		if c == nil {
			t.Errorf("%s: no TLS", name)
			continue
		}
		if c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "redis.example" {
			t.Errorf("%s: TLS with RootCAs %v, %d client certificates, ServerName %q; want the CA, one, redis.example", name, c.RootCAs != nil, len(c.Certificates), c.ServerName)
		}
	}
	if opt.TLSConfig == opt.Sentinel.TLSConfig {
		t.Error("the sentinels share the servers' *tls.Config; want a copy")
	}
	if opt.Sentinel.Dialer.Timeout != opt.Dialer.Timeout || opt.Dialer.Timeout == 0 {
		t.Errorf("sentinels dial with timeout %v, the servers with %v; want dial_timeout for both", opt.Sentinel.Dialer.Timeout, opt.Dialer.Timeout)
	}
	opt, err = redis.ParseURL("rediss://h:1?" + q)
	if err != nil {
		t.Fatal(err)
	}
	if c := opt.TLSConfig; c == nil || c.ServerName != "" || c.MinVersion != tls.VersionTLS12 || opt.Sentinel.TLSConfig != nil {
		t.Errorf("standalone: TLS %v, sentinels' TLS %v; want TLS 1.2 or later, ServerName empty (each dialed host), and no sentinel TLS", c, opt.Sentinel.TLSConfig)
	}
	opt, err = redis.ParseURL("redis://h:1?master_set=m")
	if err != nil {
		t.Fatal(err)
	}
	if opt.TLSConfig != nil || opt.Sentinel.TLSConfig != nil {
		t.Error("redis:// through Sentinel has TLS")
	}
}
