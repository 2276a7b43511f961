//go:build e2e

package deploy_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/internal/testing/testutil"
)

// chartDir is the Helm chart, relative to deploy/.
const chartDir = "helm/sluice"

// chartLabels are the labels the chart gives every object, and its
// selectors, that deploy/kubernetes has not: a release's own.
var chartLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// needHelm returns the path of helm for t: the tool directive of
// tools/go.mod, built by go tool into the Go build cache the first time
// (testutil.Tool).
func needHelm(t *testing.T) string {
	t.Helper()
	return testutil.Tool(t, "helm")
}

// helmCmd returns the command helm args, with helm's configuration,
// cache and data in directories of t's (none of the user's repositories
// or plugins) and no cluster.
func helmCmd(t *testing.T, helm string, args ...string) *exec.Cmd {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "KUBECONFIG="+filepath.Join(home, "no-kubeconfig"))
	return cmd
}

// helmValues writes values (YAML; empty: the chart's defaults) to a file
// and returns helm's arguments that give it.
func helmValues(t *testing.T, values string) []string {
	t.Helper()
	if values == "" {
		return nil
	}
	// Not in t.TempDir(), whose name holds the test's: helm splits
	// --values at commas.
	dir, err := os.MkdirTemp("", "sluice-helm-values-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--values", file}
}

// helmTemplate renders the chart as release in namespace ns with values,
// and returns the file it wrote the rendering to, or helm's error output.
func helmTemplate(t *testing.T, helm, release, ns, values string) (string, error) {
	t.Helper()
	args := append([]string{"template", release, chartDir, "--namespace", ns}, helmValues(t, values)...)
	cmd := helmCmd(t, helm, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	file := filepath.Join(t.TempDir(), release+".yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return file, nil
}

// render is helmTemplate that fails t on an error.
func render(t *testing.T, helm, release, ns, values string) string {
	t.Helper()
	file, err := helmTemplate(t, helm, release, ns, values)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

// helmRun runs helm with args and returns what it wrote to stdout,
// failing t, with what it wrote to stderr, when helm fails.
func helmRun(t *testing.T, helm string, args ...string) string {
	t.Helper()
	cmd := helmCmd(t, helm, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// helmLint runs helm lint --strict over the chart with values (warnings
// fail it too).
func helmLint(t *testing.T, helm, ns, values string) {
	t.Helper()
	helmRun(t, helm, append([]string{"lint", "--strict", chartDir, "--namespace", ns}, helmValues(t, values)...)...)
}

// trees returns every object of files but Namespaces as a generic tree,
// by "Kind name", without the labels in drop.
func trees(t *testing.T, drop []string, files ...string) map[string]any {
	t.Helper()
	objs := map[string]any{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if obj == nil || obj["kind"] == "Namespace" {
				continue
			}
			dropKeys(obj, drop)
			md, _ := obj["metadata"].(map[string]any)
			objs[fmt.Sprintf("%v %v", obj["kind"], md["name"])] = obj
		}
	}
	return objs
}

// dropKeys deletes the keys in drop from every mapping of v.
func dropKeys(v any, drop []string) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range drop {
			delete(v, k)
		}
		for _, c := range v {
			dropKeys(c, drop)
		}
	case []any:
		for _, c := range v {
			dropKeys(c, drop)
		}
	}
}

// diffTrees returns where a and b differ, each as a path and both values.
func diffTrees(path string, a, b any) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var diffs []string
		keys := maps.Clone(am)
		maps.Copy(keys, bm)
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			diffs = append(diffs, diffTrees(path+"."+k, am[k], bm[k])...)
		}
		return diffs
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok && len(as) == len(bs) {
		var diffs []string
		for i := range as {
			diffs = append(diffs, diffTrees(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i])...)
		}
		return diffs
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	if as, ok := a.(string); ok {
		if bs, ok := b.(string); ok && strings.Contains(as+bs, "\n") {
			al, bl := strings.Split(as, "\n"), strings.Split(bs, "\n")
			i := 0
			for i < len(al) && i < len(bl) && al[i] == bl[i] {
				i++
			}
			line := func(l []string) string {
				if i < len(l) {
					return fmt.Sprintf("%q", l[i])
				}
				return "the end"
			}
			return []string{fmt.Sprintf("%s: line %d: %s, want %s", path, i+1, line(al), line(bl))}
		}
	}
	return []string{fmt.Sprintf("%s: %v, want %v", path, a, b)}
}

// compareTrees fails t for every object of got and want that the other
// lacks, and for every difference of the others.
func compareTrees(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s has no %s", what, name)
			continue
		}
		for _, d := range diffTrees(name, g, want[name]) {
			t.Errorf("%s: %s", what, d)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s has %s, which deploy/kubernetes has not", what, name)
		}
	}
}

// TestHelmDefaultIsTheManifests: the chart's default values, as a release
// named sluice in namespace sluice, render the objects of deploy/kubernetes
// (but the Namespace, which helm install --create-namespace makes), field
// for field, the release's own labels apart; helm lint --strict passes
// them. So the chart and the plain manifests cannot drift apart, and every
// test of deploy/kubernetes holds for the chart's defaults too.
func TestHelmDefaultIsTheManifests(t *testing.T) {
	helm := needHelm(t)
	helmLint(t, helm, "sluice", "")
	file := render(t, helm, "sluice", "sluice", "")
	checkKit(t, decodeKube(t, file), "sluice")
	plain, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	compareTrees(t, "helm template sluice", trees(t, chartLabels, file), trees(t, nil, plain...))
}

// TestHelmTLSIsThePatch: with tls.enabled, the chart's Deployment is
// deploy/kubernetes/deployment.yaml with deploy/kubernetes/tls's patch
// applied as kubectl patch applies it (TestKubernetesTLS runs that pod).
func TestHelmTLSIsThePatch(t *testing.T) {
	helm := needHelm(t)
	file := render(t, helm, "sluice", "sluice", "tls: {enabled: true}\n")
	got := trees(t, chartLabels, file)["Deployment sluice"]
	want := trees(t, nil, "kubernetes/deployment.yaml")["Deployment sluice"]
	var patch map[string]any
	raw, err := os.ReadFile(tlsPatchFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &patch); err != nil {
		t.Fatal(err)
	}
	want = strategicMerge(want, patch)
	for _, d := range diffTrees("Deployment sluice", got, want) {
		t.Errorf("helm template --set tls.enabled=true: %s", d)
	}
}

// strategicMerge applies patch to v as a strategic merge patch of the
// lists the TLS patch touches: mappings merge key by key, lists of
// mappings that have a name merge by it (new items appended), anything
// else is replaced.
func strategicMerge(v, patch any) any {
	pm, ok := patch.(map[string]any)
	if vm, vok := v.(map[string]any); ok && vok {
		out := map[string]any{}
		for k, x := range vm {
			out[k] = x
		}
		for k, p := range pm {
			out[k] = strategicMerge(vm[k], p)
		}
		return out
	}
	ps, ok := patch.([]any)
	vs, vok := v.([]any)
	if !ok || !vok || !named(ps) || !named(vs) {
		return patch
	}
	out := slices.Clone(vs)
	for _, p := range ps {
		i := slices.IndexFunc(out, func(x any) bool { return x.(map[string]any)["name"] == p.(map[string]any)["name"] })
		if i < 0 {
			out = append(out, p)
		} else {
			out[i] = strategicMerge(out[i], p)
		}
	}
	return out
}

// named reports whether every item of list is a mapping with a name.
func named(list []any) bool {
	for _, x := range list {
		if m, ok := x.(map[string]any); !ok || m["name"] == nil {
			return false
		}
	}
	return true
}

// helmCase is a set of the chart's values and what its rendering must
// hold beyond checkKit.
type helmCase struct {
	name    string
	release string // default sluice
	values  string
	check   func(t *testing.T, k *kube, p pod)
}

// TestHelmValues renders the chart with each set of values, as the
// release named in namespace sluice: the rendering decodes strictly into
// the Kubernetes API types, holds what checkKit checks of
// deploy/kubernetes (every flag and variable one sluice serve --help has,
// every Secret required, ...) and what the case says; helm lint --strict
// passes the values.
func TestHelmValues(t *testing.T) {
	helm := needHelm(t)
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			release := c.release
			if release == "" {
				release = "sluice"
			}
			helmLint(t, helm, "sluice", c.values)
			k := decodeKube(t, render(t, helm, release, "sluice", c.values))
			checkKit(t, k, "sluice")
			c.check(t, k, k.sluicePod(t))
		})
	}
}

var helmCases = []helmCase{
	{name: "defaults", check: func(t *testing.T, k *kube, p pod) {
		wantSecretEnv(t, p, "SLUICE_REDIS_URL", "sluice-redis/url")
		if len(k.secrets) != 0 || len(k.serviceMonitors) != 0 {
			t.Errorf("%d Secrets and %d ServiceMonitors by default, want none: the Redis Secret is the user's to create", len(k.secrets), len(k.serviceMonitors))
		}
		wantReplicas(t, k, 3, 1)
	}},
	{name: "redis url", values: "redis: {url: 'redis://:s3cret@redis.db:6379/0'}\n", check: func(t *testing.T, k *kube, p pod) {
		wantSecretEnv(t, p, "SLUICE_REDIS_URL", "sluice-redis/url")
		wantSecret(t, k, "sluice-redis", "url", "redis://:s3cret@redis.db:6379/0")
		if k.deployments[0].Spec.Template.Metadata.Annotations["checksum/redis-secret"] == "" {
			t.Error("no checksum/redis-secret annotation: a new URL in the Secret would not reach the running pods, which read it at their start")
		}
	}},
	{name: "existing secret", values: "redis: {secretName: shared-redis, secretKey: uri}\n", check: func(t *testing.T, k *kube, p pod) {
		wantSecretEnv(t, p, "SLUICE_REDIS_URL", "shared-redis/uri")
		if len(k.secrets) != 0 {
			t.Errorf("%d Secrets rendered, want none: shared-redis is the user's", len(k.secrets))
		}
	}},
	{name: "in memory, one replica", values: "replicaCount: 1\nredis: {enabled: false}\n", check: func(t *testing.T, k *kube, p pod) {
		if ref, ok := p.secretEnv["SLUICE_REDIS_URL"]; ok {
			t.Errorf("SLUICE_REDIS_URL from %s with redis.enabled false", ref)
		}
		wantReplicas(t, k, 1, 0)
	}},
	{name: "replicas, image and resources", values: `replicaCount: 5
image: {repository: registry.example/team/sluice, tag: v1.2.3, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
resources: {requests: {cpu: "1", memory: 256Mi}, limits: {memory: 512Mi}}
podDisruptionBudget: {maxUnavailable: 2}
`, check: func(t *testing.T, k *kube, p pod) {
		if p.c.Image != "registry.example/team/sluice:v1.2.3" {
			t.Errorf("image %q, want registry.example/team/sluice:v1.2.3", p.c.Image)
		}
		if r := p.c.Resources; r.Requests["cpu"] != "1" || r.Requests["memory"] != "256Mi" || r.Limits["memory"] != "512Mi" {
			t.Errorf("resources %+v, want the values'", r)
		}
		wantReplicas(t, k, 5, 2)
	}},
	{name: "tls", values: "tls: {enabled: true}\n", check: func(t *testing.T, k *kube, p pod) {
		wantEnv(t, p, map[string]string{"SLUICE_TLS_CERT": "/etc/sluice-tls/tls.crt", "SLUICE_TLS_KEY": "/etc/sluice-tls/tls.key", "SLUICE_TLS_CLIENT_CA": ""})
		wantSecretVolume(t, p, "/etc/sluice-tls", "sluice-tls")
		if s := k.deployments[0].Spec.Template.Metadata.Annotations["prometheus.io/scheme"]; s != "https" {
			t.Errorf("prometheus.io/scheme %q, want https", s)
		}
		for _, s := range k.services {
			for _, port := range s.Spec.Ports {
				if port.AppProtocol == "kubernetes.io/h2c" {
					t.Errorf("Service %s port %s: appProtocol kubernetes.io/h2c (cleartext HTTP/2) over TLS", s.Metadata.Name, port.Name)
				}
			}
		}
	}},
	{name: "mutual tls", values: "tls: {enabled: true, secretName: edge-cert, clientCA: {enabled: true}}\n", check: func(t *testing.T, k *kube, p pod) {
		wantEnv(t, p, map[string]string{"SLUICE_TLS_CERT": "/etc/sluice-tls/tls.crt", "SLUICE_TLS_CLIENT_CA": "/etc/sluice-tls/ca.crt"})
		wantSecretVolume(t, p, "/etc/sluice-tls", "edge-cert")
	}},
	{name: "mutual tls, a CA of its own", values: "tls: {enabled: true, clientCA: {enabled: true, secretName: clients-ca, key: bundle.pem}}\n", check: func(t *testing.T, k *kube, p pod) {
		wantEnv(t, p, map[string]string{"SLUICE_TLS_CLIENT_CA": "/etc/sluice-tls-client-ca/bundle.pem"})
		wantSecretVolume(t, p, "/etc/sluice-tls", "sluice-tls")
		wantSecretVolume(t, p, "/etc/sluice-tls-client-ca", "clients-ca")
	}},
	{name: "admin token", values: "admin: {auth: all, token: t0ken}\n", check: func(t *testing.T, k *kube, p pod) {
		wantEnv(t, p, map[string]string{"SLUICE_ADMIN_AUTH": "all"})
		wantSecretEnv(t, p, "SLUICE_ADMIN_TOKEN", "sluice-admin/token")
		wantSecret(t, k, "sluice-admin", "token", "t0ken")
		if k.deployments[0].Spec.Template.Metadata.Annotations["checksum/admin-secret"] == "" {
			t.Error("no checksum/admin-secret annotation: a new token would not reach the running pods")
		}
	}},
	{name: "admin token of an existing secret", values: "admin: {secretName: ops, secretKey: bearer}\n", check: func(t *testing.T, k *kube, p pod) {
		wantEnv(t, p, map[string]string{"SLUICE_ADMIN_AUTH": ""})
		wantSecretEnv(t, p, "SLUICE_ADMIN_TOKEN", "ops/bearer")
		if len(k.secrets) != 0 {
			t.Errorf("%d Secrets rendered, want none: ops is the user's", len(k.secrets))
		}
	}},
	{name: "service monitor", values: "serviceMonitor: {enabled: true, interval: 15s, labels: {release: prometheus}}\n", check: func(t *testing.T, k *kube, p pod) {
		m := wantServiceMonitor(t, k)
		if m.Metadata.Labels["release"] != "prometheus" {
			t.Errorf("ServiceMonitor labels %v: want release=prometheus, which Prometheus's serviceMonitorSelector picks", m.Metadata.Labels)
		}
		if e := m.Spec.Endpoints[0]; e.Scheme != "" || e.TLSConfig != nil {
			t.Errorf("ServiceMonitor endpoint scheme %q, tlsConfig %v without TLS", e.Scheme, e.TLSConfig)
		}
	}},
	{name: "service monitor over tls", values: `tls: {enabled: true}
serviceMonitor:
  enabled: true
  tlsConfig: {ca: {secret: {name: sluice-tls, key: ca.crt}}, serverName: sluice.sluice.svc}
`, check: func(t *testing.T, k *kube, p pod) {
		m := wantServiceMonitor(t, k)
		if e := m.Spec.Endpoints[0]; e.Scheme != "https" || e.TLSConfig["serverName"] != "sluice.sluice.svc" {
			t.Errorf("ServiceMonitor endpoint scheme %q, tlsConfig %v: want https and the values' tlsConfig", e.Scheme, e.TLSConfig)
		}
	}},
	{name: "another release", release: "edge", values: "redis: {url: 'redis://redis:6379'}\n", check: func(t *testing.T, k *kube, p pod) {
		if n := k.deployments[0].Metadata.Name; n != "edge-sluice" {
			t.Errorf("Deployment %s, want edge-sluice", n)
		}
		wantSecretEnv(t, p, "SLUICE_REDIS_URL", "edge-sluice-redis/url")
		wantSecret(t, k, "edge-sluice-redis", "url", "redis://redis:6379")
		var names []string
		for _, s := range k.services {
			names = append(names, s.Metadata.Name)
		}
		if sort.Strings(names); !slices.Equal(names, []string{"edge-sluice", "edge-sluice-grpc"}) {
			t.Errorf("Services %v, want edge-sluice and edge-sluice-grpc", names)
		}
		if sel := k.deployments[0].Spec.Selector.MatchLabels; sel["app.kubernetes.io/instance"] != "edge" {
			t.Errorf("Deployment selector %v: want the release's own pods (app.kubernetes.io/instance edge), not another release's", sel)
		}
	}},
	{name: "more variables", values: "extraEnv: [{name: SLUICE_LOG_DENIALS, value: '1'}, {name: SLUICE_ON_ERROR, value: deny}]\n", check: func(t *testing.T, k *kube, p pod) {
		wantEnv(t, p, map[string]string{"SLUICE_LOG_DENIALS": "1", "SLUICE_ON_ERROR": "deny"})
	}},
}

// wantSecretEnv fails t unless the pod reads env from the Secret ref
// (name/key).
func wantSecretEnv(t *testing.T, p pod, env, ref string) {
	t.Helper()
	if got := p.secretEnv[env]; got != ref {
		t.Errorf("%s from Secret %q, want %q", env, got, ref)
	}
}

// wantEnv fails t unless the pod sets each variable of env to its value
// ("": not at all).
func wantEnv(t *testing.T, p pod, env map[string]string) {
	t.Helper()
	for k, want := range env {
		if got := p.env[k]; got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
}

// wantSecret fails t unless the rendering holds the Secret name, whose
// key holds value.
func wantSecret(t *testing.T, k *kube, name, key, value string) {
	t.Helper()
	for _, s := range k.secrets {
		if s.Metadata.Name != name {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(s.Data[key])
		if err != nil || string(got) != value {
			t.Errorf("Secret %s key %s holds %q (%v), want %q", name, key, got, err, value)
		}
		return
	}
	t.Errorf("no Secret %s rendered", name)
}

// wantSecretVolume fails t unless the Secret secretName is mounted at dir
// as a directory, read-only (a subPath file is never renewed).
func wantSecretVolume(t *testing.T, p pod, dir, secretName string) {
	t.Helper()
	for _, m := range p.c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		if m.SubPath != "" || !m.ReadOnly {
			t.Errorf("%s mounted with subPath %q, readOnly %v: want the directory, read-only", dir, m.SubPath, m.ReadOnly)
		}
		for _, v := range p.spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secretName {
				return
			}
		}
		t.Errorf("the volume at %s is not Secret %s", dir, secretName)
		return
	}
	t.Errorf("nothing mounted at %s (Secret %s)", dir, secretName)
}

// wantReplicas fails t unless the Deployment has replicas pods and the
// PodDisruptionBudget lets maxUnavailable of them go (0: no budget).
func wantReplicas(t *testing.T, k *kube, replicas, maxUnavailable int) {
	t.Helper()
	if r := k.deployments[0].Spec.Replicas; r != replicas {
		t.Errorf("%d replicas, want %d", r, replicas)
	}
	switch {
	case maxUnavailable == 0 && len(k.pdbs) != 0:
		t.Errorf("a PodDisruptionBudget over %d pod: it blocks every drain or protects nothing", replicas)
	case maxUnavailable > 0 && (len(k.pdbs) != 1 || k.pdbs[0].Spec.MaxUnavailable == nil || *k.pdbs[0].Spec.MaxUnavailable != maxUnavailable):
		t.Errorf("PodDisruptionBudgets %+v, want one of maxUnavailable %d", k.pdbs, maxUnavailable)
	}
}

// wantServiceMonitor returns the rendering's one ServiceMonitor, failing t
// unless it scrapes /metrics on the http port of a Service over the pods.
func wantServiceMonitor(t *testing.T, k *kube) serviceMonitor {
	t.Helper()
	if len(k.serviceMonitors) != 1 {
		t.Fatalf("%d ServiceMonitors, want one", len(k.serviceMonitors))
	}
	m := k.serviceMonitors[0]
	if len(m.Spec.Endpoints) != 1 || m.Spec.Endpoints[0].Port != "http" || m.Spec.Endpoints[0].Path != "/metrics" {
		t.Fatalf("ServiceMonitor endpoints %+v, want /metrics of port http", m.Spec.Endpoints)
	}
	scraped := 0
	for _, s := range k.services {
		if !subset(m.Spec.Selector.MatchLabels, s.Metadata.Labels) {
			continue
		}
		for _, port := range s.Spec.Ports {
			if port.Name == "http" {
				scraped++
			}
		}
	}
	if scraped != 1 {
		t.Errorf("the ServiceMonitor's selector %v picks %d Services with an http port, want one", m.Spec.Selector.MatchLabels, scraped)
	}
	if pods := k.deployments[0].Spec.Template.Metadata.Labels; !subset(m.Spec.Selector.MatchLabels, pods) {
		t.Errorf("the ServiceMonitor selects %v, not labels of the pods' Services (%v)", m.Spec.Selector.MatchLabels, pods)
	}
	return m
}

// TestHelmRefuses: values that would deploy a kit that does not do what
// it says fail the rendering, with a message that says what to set; so
// do a misspelt value and one of the wrong type (values.schema.json).
func TestHelmRefuses(t *testing.T) {
	helm := needHelm(t)
	for _, c := range []struct {
		name, values string
		want         []string
	}{
		{"in memory, three replicas", "redis: {enabled: false}\n", []string{"each pod would count alone", "3 pods would admit 3 times every limit", "replicaCount=1"}},
		{"in memory, with a url", "replicaCount: 1\nredis: {enabled: false, url: 'redis://redis:6379'}\n", []string{"redis.enabled is false, but redis.url or redis.secretName is set"}},
		{"not a redis url", "redis: {url: 'http://user:hunter2@redis:6379'}\n", []string{"redis.url is not a redis://, rediss:// or unix:// URL"}},
		{"auth all without a token", "admin: {auth: all}\n", []string{"admin.auth is all, but the pods get no token", "admin.token"}},
		{"mutual tls without tls", "tls: {clientCA: {enabled: true}}\n", []string{"tls.clientCA.enabled needs tls.enabled"}},
		{"a budget of every pod", "podDisruptionBudget: {maxUnavailable: 3}\n", []string{"maxUnavailable 3 of replicaCount 3 would let a drain take every pod"}},
		{"a misspelt value", "replicas: 5\n", []string{"replicas"}},
		{"a misspelt nested value", "redis: {uri: 'redis://redis:6379'}\n", []string{"uri"}},
		{"a value of the wrong type", "replicaCount: three\n", []string{"replicaCount"}},
		{"an unknown auth", "admin: {auth: reads}\n", []string{"admin", "auth"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file, err := helmTemplate(t, helm, "sluice", "sluice", c.values)
			if err == nil {
				raw, _ := os.ReadFile(file)
				t.Fatalf("helm template with %q rendered:\n%s", c.values, raw)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("helm template's error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("helm template's error repeats the URL's password:\n%v", err)
			}
		})
	}
}

// TestHelmNotes: helm install prints, where the chart does not write the
// Redis Secret, that the pods wait for it and the command that creates
// it, the one deploy/README.md gives; with redis.url it asks for nothing.
func TestHelmNotes(t *testing.T) {
	helm := needHelm(t)
	notes := func(values string) string {
		out := helmRun(t, helm, append([]string{"install", "sluice", chartDir, "--namespace", "sluice", "--dry-run=client"}, helmValues(t, values)...)...)
		_, n, ok := strings.Cut(out, "\nNOTES:\n")
		if !ok {
			t.Fatalf("helm install --dry-run=client printed no NOTES:\n%s", out)
		}
		return n
	}
	const create = "kubectl -n sluice create secret generic sluice-redis --from-literal=url=redis://:PASSWORD@redis:6379/0"
	n := notes("")
	for _, want := range []string{"CreateContainerConfigError", create} {
		if !strings.Contains(n, want) {
			t.Errorf("the NOTES of the defaults lack %q:\n%s", want, n)
		}
	}
	if !slices.Contains(shCommands(readmeSection(t, "Helm"))[0], create) {
		t.Errorf("deploy/README.md's Helm install lacks the NOTES' %q", create)
	}
	if n := notes("redis: {url: 'redis://redis:6379'}\n"); strings.Contains(n, "create secret") {
		t.Errorf("with redis.url the NOTES still ask for the Secret:\n%s", n)
	}
}
