//go:build e2e

package deploy_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/internal/testing/certtest"
)

// tlsPatchFile is the strategic merge patch that puts the Deployment's
// listeners on TLS.
const tlsPatchFile = "kubernetes/tls/deployment-patch.yaml"

// tlsPatch is the part of tlsPatchFile the test reads: as the Deployment,
// with the probes' scheme and the Secret volume.
type tlsPatch struct {
	Spec struct {
		Template struct {
			Metadata meta `yaml:"metadata"`
			Spec     struct {
				Containers []struct {
					Name string `yaml:"name"`
					Env  []struct {
						Name  string `yaml:"name"`
						Value string `yaml:"value"`
					} `yaml:"env"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
						SubPath   string `yaml:"subPath"`
						ReadOnly  bool   `yaml:"readOnly"`
					} `yaml:"volumeMounts"`
					ReadinessProbe *schemeProbe `yaml:"readinessProbe"`
					LivenessProbe  *schemeProbe `yaml:"livenessProbe"`
					StartupProbe   *schemeProbe `yaml:"startupProbe"`
				} `yaml:"containers"`
				Volumes []struct {
					Name   string `yaml:"name"`
					Secret *struct {
						SecretName string `yaml:"secretName"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type schemeProbe struct {
	HTTPGet struct {
		Scheme string `yaml:"scheme"`
	} `yaml:"httpGet"`
}

// loadTLSPatch reads tlsPatchFile, refusing fields the test does not
// know: they would go unchecked.
func loadTLSPatch(t *testing.T) *tlsPatch {
	t.Helper()
	raw, err := os.ReadFile(tlsPatchFile)
	if err != nil {
		t.Fatal(err)
	}
	var p tlsPatch
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("%s: %v", tlsPatchFile, err)
	}
	return &p
}

// TestKubernetesTLS runs the Deployment's pod with the TLS patch applied
// as kubectl patch applies it: the certificate and key of the Secret,
// mounted as a directory laid out as the kubelet lays out a Secret volume,
// the probes' paths answered over HTTPS as the kubelet asks them (without
// verifying the certificate), in plaintext refused; a renewed Secret (the
// kubelet's swap of ..data) is served to new handshakes without a restart.
func TestKubernetesTLS(t *testing.T) {
	k := loadKube(t)
	p := k.sluicePod(t)
	patch := loadTLSPatch(t)
	ptmpl := patch.Spec.Template
	if s := ptmpl.Metadata.Annotations["prometheus.io/scheme"]; s != "https" {
		t.Errorf("the patch's prometheus.io/scheme annotation is %q: the scrape would be refused in plaintext", s)
	}
	if len(ptmpl.Spec.Containers) != 1 || ptmpl.Spec.Containers[0].Name != p.c.Name {
		t.Fatalf("the patch's containers %+v: want the one %s, which kubectl patch merges by name", ptmpl.Spec.Containers, p.c.Name)
	}
	pc := ptmpl.Spec.Containers[0]
	for _, pr := range []struct {
		name string
		p    *schemeProbe
	}{{"readinessProbe", pc.ReadinessProbe}, {"livenessProbe", pc.LivenessProbe}, {"startupProbe", pc.StartupProbe}} {
		if pr.p == nil || pr.p.HTTPGet.Scheme != "HTTPS" {
			t.Errorf("the patch's %s asks in plaintext: over TLS the kubelet would get 400 and restart the pod", pr.name)
		}
	}

	// The Secret: a volume mounted as a directory, where the variables
	// point.
	env := map[string]string{}
	for _, e := range pc.Env {
		env[e.Name] = e.Value
	}
	tlsDir := path.Dir(env["SLUICE_TLS_CERT"])
	if env["SLUICE_TLS_CERT"] == "" || path.Dir(env["SLUICE_TLS_KEY"]) != tlsDir {
		t.Fatalf("the patch's SLUICE_TLS_CERT %q and SLUICE_TLS_KEY %q: want both, in one directory", env["SLUICE_TLS_CERT"], env["SLUICE_TLS_KEY"])
	}
	secret := ""
	for _, m := range pc.VolumeMounts {
		if m.MountPath != tlsDir {
			continue
		}
		if m.SubPath != "" || !m.ReadOnly {
			t.Errorf("the Secret is mounted with subPath %q, readOnly %v: want the directory, read-only (a subPath file is never renewed)", m.SubPath, m.ReadOnly)
		}
		for _, v := range ptmpl.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				secret = v.Secret.SecretName
			}
		}
	}
	if secret == "" {
		t.Fatalf("no Secret volume is mounted at %s, where SLUICE_TLS_CERT points", tlsDir)
	}

	files, ca := certtest.NewFilesOf(t)
	read := func(file string) string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	certKey, keyKey := path.Base(env["SLUICE_TLS_CERT"]), path.Base(env["SLUICE_TLS_KEY"])
	vol := newConfigMapVolume(t, map[string]string{certKey: read(files.ServerCert), keyKey: read(files.ServerKey)})
	policy := newConfigMapVolume(t, p.cm.Data)
	podEnv, httpAddr, _ := p.podEnv(t, policy.dir)
	for name, v := range env {
		podEnv[name] = strings.Replace(v, tlsDir, vol.dir, 1)
	}
	base := "https://" + httpAddr
	startSluice(t, p.c.Args, podEnv, base+p.c.LivenessProbe.HTTPGet.Path)
	httpAddr = podEnv["SLUICE_LISTEN"] // moved if taken
	base = "https://" + httpAddr

	for _, probe := range []string{p.c.ReadinessProbe.HTTPGet.Path, p.c.LivenessProbe.HTTPGet.Path, p.c.StartupProbe.HTTPGet.Path} {
		if code, body := get(base + probe); code != http.StatusOK {
			t.Errorf("the kubelet's GET %s over HTTPS: %d %s", probe, code, body)
		}
		// The control: the manifest's probe without the patch, in
		// plaintext.
		if code, body := get("http://" + httpAddr + probe); code != http.StatusBadRequest {
			t.Errorf("GET %s in plaintext: %d %s, want 400", probe, code, body)
		}
	}
	verified := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(t, nil), DisableKeepAlives: true}}
	serial := func() (string, error) {
		resp, err := verified.Get(base + "/healthz")
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("/healthz: %s", resp.Status)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.String(), nil
	}
	first, err := serial()
	if err != nil {
		t.Fatalf("a client verifying the certificate: %v", err)
	}
	if code, body := check(base, "login", "203.0.113.7"); code != http.StatusOK {
		t.Errorf("/v1/check of the ConfigMap's rule login over HTTPS: %d %s", code, body)
	}

	// The Secret renewed: the kubelet writes the new version and swaps
	// ..data to it.
	renewed := ca.Server(t)
	vol.update(t, map[string]string{certKey: string(renewed.CertPEM), keyKey: string(renewed.KeyPEM)})
	eventually(t, 10*time.Second, func() error {
		got, err := serial()
		if err != nil || got != renewed.Cert.SerialNumber.String() {
			return fmt.Errorf("after the Secret's renewal: serial %s (%v), want the renewed %s (the first: %s)", got, err, renewed.Cert.SerialNumber, first)
		}
		return nil
	})
}

// kubeletTLS is how the kubelet's probes speak HTTPS: without verifying
// the certificate.
var kubeletTLS = &tls.Config{InsecureSkipVerify: true}
