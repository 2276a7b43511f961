//go:build integration

package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testing/certtest"
)

// tlsPKI is a test's CA, the files sluice serves, and a CA sluice does
// not trust.
type tlsPKI struct {
	certtest.Files
	ca, stranger *certtest.CA
}

func newTLSPKI(t *testing.T) *tlsPKI {
	files, ca := certtest.NewFilesOf(t)
	return &tlsPKI{Files: files, ca: ca, stranger: certtest.NewCA(t, "stranger CA")}
}

// serverArgs are the flags of sluice's listeners' TLS: mutual or not.
func (p *tlsPKI) serverArgs(mutual bool) []string {
	args := []string{"--tls-cert", p.ServerCert, "--tls-key", p.ServerKey}
	if mutual {
		args = append(args, "--tls-client-ca", p.CA)
	}
	return args
}

// clients returns the TLS client configurations each listener is tried
// with: a client certificate of the CA, none, and one of a stranger CA,
// each trusting the CA's server certificate.
func (p *tlsPKI) clients(t *testing.T) (good, none, stranger *tls.Config) {
	return p.ca.ClientConfig(t, p.ca.Client(t, "app")), p.ca.ClientConfig(t, nil), p.ca.ClientConfig(t, p.stranger.Client(t, "intruder"))
}

// rotate writes a new server certificate of the CA in place of the one
// served and returns its serial number as the serving line logs it.
func (p *tlsPKI) rotate(t *testing.T) string {
	pair := p.ca.Server(t)
	pair.Write(t, p.ServerCert, p.ServerKey)
	return fmt.Sprintf("%X", pair.Cert.SerialNumber)
}

// fileSerial returns the serial number of the certificate in file, as the
// serving line logs it.
func fileSerial(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%X", pair.Leaf.SerialNumber)
}

// tlsGet sends one request on a connection of its own with cfg and
// returns the status, the body and the serial number of the certificate
// the server presented.
func tlsGet(cfg *tls.Config, method, url, body string) (int, string, string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	return send(c, method, url, body)
}

// send sends one request with c and returns as tlsGet does.
func send(c *http.Client, method, url, body string) (int, string, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	serial := ""
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		serial = fmt.Sprintf("%X", resp.TLS.PeerCertificates[0].SerialNumber)
	}
	return resp.StatusCode, string(b), serial, err
}

// listenerCase is one of a daemon's HTTP listeners and a request it
// answers 200 with body holding want.
type listenerCase struct {
	name, method, url, body, want string
}

// checkHTTPListeners fails t unless each listener answers a client with
// good, refuses one without a certificate and one with a stranger's (when
// mutual), and answers a plaintext client 400.
func checkHTTPListeners(t *testing.T, cases []listenerCase, mutual bool, good, none, stranger *tls.Config, serial string) {
	t.Helper()
	for _, l := range cases {
		code, body, got, err := tlsGet(good, l.method, l.url, l.body)
		if err != nil || code != 200 || !strings.Contains(body, l.want) || got != serial {
			t.Errorf("%s with a client certificate: %d %.200q serial %s (%v), want 200 with %q, serial %s", l.name, code, body, got, err, l.want, serial)
		}
		if mutual {
			for _, c := range []struct {
				name string
				cfg  *tls.Config
				want string
			}{{"no client certificate", none, "certificate required"}, {"a stranger CA's certificate", stranger, "unknown certificate authority"}} {
				if code, body, _, err := tlsGet(c.cfg, l.method, l.url, l.body); !certtest.Refused(err, c.want) {
					t.Errorf("%s with %s: %d %.100q (%v), want refused in the handshake: %s", l.name, c.name, code, body, err, c.want)
				}
			}
		}
		plain := "http://" + strings.TrimPrefix(l.url, "https://")
		if code, body, _, err := tlsGet(nil, l.method, plain, l.body); err != nil || code != 400 || !strings.Contains(body, "HTTP request to an HTTPS server") {
			t.Errorf("%s in plaintext: %d %.100q (%v), want 400 Client sent an HTTP request to an HTTPS server", l.name, code, body, err)
		}
	}
}

// rlsClient is a gRPC client of Envoy's rate limit service over TLS.
type rlsClient struct {
	conn   *grpc.ClientConn
	client rlsv3.RateLimitServiceClient
}

func dialRLSTLS(t *testing.T, addr string, creds credentials.TransportCredentials) *rlsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rlsClient{conn: conn, client: rlsv3.NewRateLimitServiceClient(conn)}
}

// ask asks for rule r of a sluice policy file and returns the overall
// code and the serial number of the certificate its connection was
// served.
func (c *rlsClient) ask() (rlsv3.RateLimitResponse_Code, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var p peer.Peer
	resp, err := c.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "rule", Value: "r"}, {Key: "remote_address", Value: "192.0.2.1"}},
	}}}, grpc.Peer(&p))
	if err != nil {
		return 0, "", err
	}
	serial := ""
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		serial = fmt.Sprintf("%X", info.State.PeerCertificates[0].SerialNumber)
	}
	return resp.GetOverallCode(), serial, nil
}

// TestServeTLS: with --tls-cert, --tls-key and --tls-client-ca every
// listener of sluice serve (HTTP, gRPC, the dashboard's, pprof's) speaks
// mutual TLS only: a client with a certificate of the CA is served, one
// without a certificate or with a stranger CA's is refused in the
// handshake, a plaintext one gets 400 (gRPC: fails). A rotated certificate
// is served to new handshakes while connections opened before carry on;
// files that are not valid keep the previous certificate serving.
func TestServeTLS(t *testing.T) {
	pki := newTLSPKI(t)
	cfg := writeFile(t, "rules:\n  - {name: r, key: ip, limit: 1000, period: 1m}\n")
	d := startServe(t, nil, append([]string{"--config", cfg, "--dashboard-listen", "127.0.0.1:0", "--pprof-listen", "127.0.0.1:0", "--reload-interval", "100ms"}, pki.serverArgs(true)...)...)
	first := fileSerial(t, pki.ServerCert, pki.ServerKey)
	if mode, serial := servingAttr(t, d, "tls"), servingAttr(t, d, "tls_serial"); mode != "mutual" || serial != first {
		t.Errorf("serving line: tls=%s tls_serial=%s, want mutual and %s", mode, serial, first)
	}
	api := "https://" + strings.TrimPrefix(d.base, "http://")
	dash, pprof := "https://"+servingAttr(t, d, "dashboard"), "https://"+servingAttr(t, d, "pprof")
	good, none, stranger := pki.clients(t)
	cases := []listenerCase{
		{"--listen POST /v1/check", "POST", api + "/v1/check", `{"rule":"r","key":"192.0.2.1"}`, `"allowed":true`},
		{"--listen GET /readyz", "GET", api + "/readyz", "", "ok"},
		{"--dashboard-listen GET /", "GET", dash + "/", "", "<title>sluice dashboard</title>"},
		{"--pprof-listen GET /debug/pprof/", "GET", pprof + "/debug/pprof/", "", "goroutine"},
	}
	checkHTTPListeners(t, cases, true, good, none, stranger, first)

	// gRPC: a client certificate of the CA is served, the others refused.
	rls := dialRLSTLS(t, d.grpc, credentials.NewTLS(good))
	if code, serial, err := rls.ask(); err != nil || code != rlsv3.RateLimitResponse_OK || serial != first {
		t.Errorf("gRPC with a client certificate: %v serial %s (%v), want OK and %s", code, serial, err, first)
	}
	// (What the refused client is told races with the server closing
	// the connection: the alert, or a broken pipe; the call fails
	// Unavailable either way, where the client above was answered.)
	for _, c := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"no client certificate", credentials.NewTLS(none)},
		{"a stranger CA's certificate", credentials.NewTLS(stranger)},
		{"plaintext", insecure.NewCredentials()},
	} {
		if code, _, err := dialRLSTLS(t, d.grpc, c.creds).ask(); status.Code(err) != codes.Unavailable {
			t.Errorf("gRPC with %s: %v (%v), want refused: Unavailable", c.name, code, err)
		}
	}

	// A keep-alive HTTP connection and the gRPC connection, open before
	// the rotation.
	var reused bool
	keep := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: good}}
	trace := func(method, url, body string) (int, string, string, error) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			return 0, "", "", err
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
		resp, err := keep.Do(req)
		if err != nil {
			return 0, "", "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), fmt.Sprintf("%X", resp.TLS.PeerCertificates[0].SerialNumber), err
	}
	if code, _, serial, err := trace("POST", api+"/v1/check", `{"rule":"r","key":"192.0.2.1"}`); err != nil || code != 200 || serial != first {
		t.Fatalf("keep-alive client: %d serial %s (%v)", code, serial, err)
	}

	rotated := pki.rotate(t)
	if rotated == first {
		t.Fatal("the rotated certificate has the first's serial: the test could not tell them apart")
	}
	if got := d.waitLog(t, "TLS files reloaded"); got["tls_serial"] != rotated {
		t.Errorf("reload logged tls_serial %v, want %s", got["tls_serial"], rotated)
	}
	for _, l := range cases {
		if _, _, got, err := tlsGet(good, l.method, l.url, l.body); err != nil || got != rotated {
			t.Errorf("%s after the rotation: serial %s (%v), want the new %s", l.name, got, err, rotated)
		}
	}
	if code, serial, err := dialRLSTLS(t, d.grpc, credentials.NewTLS(good)).ask(); err != nil || code != rlsv3.RateLimitResponse_OK || serial != rotated {
		t.Errorf("a new gRPC connection after the rotation: %v serial %s (%v), want OK and %s", code, serial, err, rotated)
	}
	// The connections opened before carry on, with the certificate they
	// were served.
	if code, _, serial, err := trace("POST", api+"/v1/check", `{"rule":"r","key":"192.0.2.1"}`); err != nil || code != 200 || serial != first || !reused {
		t.Errorf("the keep-alive connection after the rotation: %d serial %s reused %v (%v), want 200 on the same connection, serial %s", code, serial, reused, err, first)
	}
	if code, serial, err := rls.ask(); err != nil || code != rlsv3.RateLimitResponse_OK || serial != first {
		t.Errorf("the gRPC connection after the rotation: %v serial %s (%v), want OK on the first connection (serial %s)", code, serial, err, first)
	}

	// A key that is not PEM: rejected, and the rotated pair serves on.
	if err := os.WriteFile(pki.ServerKey, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	warn := d.waitLog(t, "TLS files rejected")
	if warn["level"] != "WARN" || !strings.Contains(fmt.Sprint(warn["error"]), "--tls-key "+pki.ServerKey+" holds no PEM private key") {
		t.Errorf("rejection logged as %v, want a warning naming --tls-key and its file", warn)
	}
	for _, l := range cases {
		if _, _, got, err := tlsGet(good, l.method, l.url, l.body); err != nil || got != rotated {
			t.Errorf("%s after invalid files: serial %s (%v), want the previous %s", l.name, got, err, rotated)
		}
	}
	if code := d.terminate(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d, want 0", code)
	}
}

// TestProxyTLS: sluice proxy's listener and its --metrics-listen speak
// TLS (without client certificates: any client is served), from the
// variables SLUICE_TLS_CERT and SLUICE_TLS_KEY; with polling off, a
// rotated certificate is served after SIGHUP, and not before. With
// --tls-client-ca they speak mutual TLS.
func TestProxyTLS(t *testing.T) {
	pki := newTLSPKI(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "upstream answered "+r.URL.Path) }))
	defer upstream.Close()
	cfg := writeFile(t, "rules:\n  - {name: r, key: ip, limit: 1000, period: 1m}\n")
	d := startDaemon(t, "proxying", []string{"SLUICE_TLS_CERT=" + pki.ServerCert, "SLUICE_TLS_KEY=" + pki.ServerKey},
		"proxy", "--config", cfg, "--upstream", upstream.URL, "--metrics-listen", "127.0.0.1:0", "--reload-interval", "0")
	first := fileSerial(t, pki.ServerCert, pki.ServerKey)
	if mode := servingAttrOf(t, d, "proxying", "tls"); mode != "on" {
		t.Errorf("proxying line: tls=%s, want on", mode)
	}
	good, none, _ := pki.clients(t)
	proxy := "https://" + strings.TrimPrefix(d.base, "http://")
	cases := []listenerCase{
		{"--listen", "GET", proxy + "/hello", "", "upstream answered /hello"},
		{"--metrics-listen", "GET", "https://" + servingAttrOf(t, d, "proxying", "metrics") + "/metrics", "", "sluice_decisions_total"},
	}
	checkHTTPListeners(t, cases, false, good, none, nil, first)
	// Not mutual: a client without a certificate is served too.
	if code, body, _, err := tlsGet(none, "GET", proxy+"/hello", ""); err != nil || code != 200 {
		t.Errorf("a client without a certificate: %d %.100q (%v), want 200", code, body, err)
	}

	rotated := pki.rotate(t)
	// The control: no poll, no signal, no reload.
	if _, _, got, err := tlsGet(good, "GET", proxy+"/hello", ""); err != nil || got != first {
		t.Errorf("before SIGHUP with polling off: serial %s (%v), want the first %s", got, err, first)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := d.waitLog(t, "TLS files reloaded"); got["trigger"] != "signal" || got["tls_serial"] != rotated {
		t.Errorf("reload logged %v, want trigger signal and tls_serial %s", got, rotated)
	}
	for _, l := range cases {
		if _, _, got, err := tlsGet(good, l.method, l.url, l.body); err != nil || got != rotated {
			t.Errorf("%s after SIGHUP: serial %s (%v), want the new %s", l.name, got, err, rotated)
		}
	}

	// With --tls-client-ca, both listeners want a client certificate of
	// the CA.
	d = startDaemon(t, "proxying", nil, append([]string{"proxy", "--config", cfg, "--upstream", upstream.URL, "--metrics-listen", "127.0.0.1:0"}, pki.serverArgs(true)...)...)
	if mode := servingAttrOf(t, d, "proxying", "tls"); mode != "mutual" {
		t.Errorf("proxying line: tls=%s, want mutual", mode)
	}
	_, _, stranger := pki.clients(t)
	proxy = "https://" + strings.TrimPrefix(d.base, "http://")
	checkHTTPListeners(t, []listenerCase{
		{"mutual --listen", "GET", proxy + "/hello", "", "upstream answered /hello"},
		{"mutual --metrics-listen", "GET", "https://" + servingAttrOf(t, d, "proxying", "metrics") + "/metrics", "", "sluice_decisions_total"},
	}, true, good, none, stranger, rotated)
}

// servingAttrOf returns attribute name of d's first log line msg.
func servingAttrOf(t *testing.T, d *daemon, msg, name string) string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, line := range d.lines {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == msg {
			return fmt.Sprint(entry[name])
		}
	}
	t.Fatalf("no %q line: %v", msg, d.lines)
	return ""
}

// TestTLSClients: sluice bench, over HTTP and gRPC, and sluice top speak
// mutual TLS to a sluice serve with their --tls-ca, --tls-cert and
// --tls-key; without the client certificate every request fails.
func TestTLSClients(t *testing.T) {
	pki := newTLSPKI(t)
	cfg := writeFile(t, "rules:\n  - {name: b, key: ip, limit: 5, period: 1h}\n")
	d := startServe(t, nil, append([]string{"--config", cfg, "--dashboard-listen", "127.0.0.1:0"}, pki.serverArgs(true)...)...)
	api := "https://" + strings.TrimPrefix(d.base, "http://")
	client := []string{"--tls-ca", pki.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey}

	s := runBenchJSON(t, append([]string{"--http", api, "--rule", "b", "--keys", "4", "--requests", "40", "--concurrency", "4"}, client...)...)
	if s.Requests != 40 || s.Allowed != 20 || s.Denied != 20 || s.Errors != 0 {
		t.Errorf("bench over HTTPS: %+v, want 40 requests, 20 allowed, 20 denied", s)
	}
	s = runBenchJSON(t, append([]string{"--grpc", d.grpc, "--descriptor", "rule=b,remote_address={ip}", "--keys", "8", "--requests", "40", "--concurrency", "4"}, client...)...)
	if s.Requests != 40 || s.Allowed != 20 || s.Denied != 20 || s.Errors != 0 {
		t.Errorf("bench over gRPC with TLS: %+v, want 40 requests, 20 allowed (4 new keys x 5), 20 denied", s)
	}
	// Without the client certificate, and in plaintext: every request
	// fails, and bench says why.
	for _, bad := range []struct {
		name string
		args []string
		want string
	}{
		{"HTTPS without a client certificate", []string{"--http", api, "--rule", "b", "--tls-ca", pki.CA}, "certificate required"},
		{"gRPC without a client certificate", []string{"--grpc", d.grpc, "--descriptor", "rule=b,remote_address={ip}", "--tls-ca", pki.CA}, "certificate required"},
		{"gRPC in plaintext", []string{"--grpc", d.grpc, "--descriptor", "rule=b,remote_address={ip}"}, ""},
	} {
		_, stderr, code := runBinary(t, nil, append([]string{"bench", "--requests", "3", "--progress=false"}, bad.args...)...)
		refused := bad.want == "" || certtest.Refused(errors.New(stderr), bad.want)
		if code != 1 || !strings.Contains(stderr, "every request failed") || !refused {
			t.Errorf("bench %s: exit %d, %s; want 1 and %q", bad.name, code, stderr, bad.want)
		}
	}

	dash := "https://" + servingAttr(t, d, "dashboard")
	stdout, stderr, code := runBinary(t, []string{"SLUICE_CLIENT_TLS_CA=" + pki.CA, "SLUICE_CLIENT_TLS_CERT=" + pki.ClientCert, "SLUICE_CLIENT_TLS_KEY=" + pki.ClientKey},
		"inspect", "--server", dash, "--rule", "b", "--key", "10.0.0.0")
	if code != 0 || !strings.Contains(stdout, `rule b, key "10.0.0.0"`) {
		t.Errorf("inspect over mutual TLS: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := runBinary(t, nil, "top", "--server", dash, "--tls-ca", pki.CA); code != 1 || !certtest.Refused(errors.New(stderr), "certificate required") {
		t.Errorf("top without a client certificate: exit %d, %s; want 1, refused", code, stderr)
	}
}

// TestTLSFlagErrors: TLS flags that cannot work are refused at the start,
// naming the flag and the file.
func TestTLSFlagErrors(t *testing.T) {
	pki := newTLSPKI(t)
	cfg := writeFile(t, "rules:\n  - {name: r, key: ip, limit: 5, period: 1m}\n")
	missing := pki.CA + ".missing"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--config", cfg, "--tls-cert", pki.ServerCert}, 2, "--tls-cert needs --tls-key"},
		{[]string{"proxy", "--config", cfg, "--upstream", "http://127.0.0.1:1", "--tls-client-ca", pki.CA}, 2, "--tls-client-ca needs --tls-cert and --tls-key"},
		{[]string{"serve", "--config", cfg, "--tls-cert", missing, "--tls-key", pki.ServerKey}, 1, "--tls-cert " + missing + ": no such file or directory"},
		{[]string{"serve", "--config", cfg, "--tls-cert", pki.ServerCert, "--tls-key", pki.ClientKey}, 1, "private key does not match public key"},
		{[]string{"serve", "--config", cfg, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-client-ca", pki.ServerKey}, 1, "--tls-client-ca " + pki.ServerKey + " holds no PEM certificate"},
		{[]string{"bench", "--http", "http://127.0.0.1:1", "--rule", "r", "--tls-ca", pki.CA}, 2, "--tls-ca: only for an https:// --http"},
		{[]string{"bench", "--http", "https://127.0.0.1:1", "--rule", "r", "--tls-cert", pki.ClientCert}, 2, "--tls-cert needs --tls-key"},
		{[]string{"top", "--server", "http://127.0.0.1:1", "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey}, 2, "--tls-cert, --tls-key: only for an https:// --server"},
	} {
		_, stderr, code := runBounded(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("sluice %s: exit %d, %s; want %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
	}
}

// runBounded runs the binary with args, as runBinary does, killing it
// after 30s: a command that should have refused its flags at once does
// not hang the test when it serves instead.
func runBounded(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("sluice %s still ran after 30s", strings.Join(args, " "))
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}
