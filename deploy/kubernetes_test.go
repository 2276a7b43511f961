//go:build e2e

package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/internal/testing/redistest"
)

// The parts of the Kubernetes objects the tests read (yaml.v3 ignores
// the others; kubestrict holds every field to the Kubernetes API types).
type (
	meta struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	}
	selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	deployment struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			Replicas int      `yaml:"replicas"`
			Selector selector `yaml:"selector"`
			Template struct {
				Metadata meta    `yaml:"metadata"`
				Spec     podSpec `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	podSpec struct {
		TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
		SecurityContext               struct {
			RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
			RunAsUser    *int64 `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
			Secret *struct {
				SecretName string `yaml:"secretName"`
			} `yaml:"secret"`
		} `yaml:"volumes"`
	}
	container struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				SecretKeyRef *struct {
					Name     string `yaml:"name"`
					Key      string `yaml:"key"`
					Optional bool   `yaml:"optional"`
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		StartupProbe   *probe `yaml:"startupProbe"`
		Lifecycle      struct {
			PreStop struct {
				Sleep *struct {
					Seconds int `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		Resources struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			SubPath   string `yaml:"subPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	probe struct {
		HTTPGet *struct {
			Path   string `yaml:"path"`
			Port   string `yaml:"port"` // a number or a port's name
			Scheme string `yaml:"scheme"`
		} `yaml:"httpGet"`
		TCPSocket *struct {
			Port string `yaml:"port"`
		} `yaml:"tcpSocket"`
	}
	service struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			ClusterIP string            `yaml:"clusterIP"`
			Selector  map[string]string `yaml:"selector"`
			Ports     []struct {
				Name        string `yaml:"name"`
				Port        int    `yaml:"port"`
				TargetPort  string `yaml:"targetPort"`
				AppProtocol string `yaml:"appProtocol"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	secret struct {
		Metadata meta              `yaml:"metadata"`
		Type     string            `yaml:"type"`
		Data     map[string]string `yaml:"data"` // base64
	}
	serviceMonitor struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			Selector  selector `yaml:"selector"`
			Endpoints []struct {
				Port      string         `yaml:"port"`
				Path      string         `yaml:"path"`
				Scheme    string         `yaml:"scheme"`
				TLSConfig map[string]any `yaml:"tlsConfig"`
			} `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	configMap struct {
		Metadata meta              `yaml:"metadata"`
		Data     map[string]string `yaml:"data"`
	}
	pdb struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			MaxUnavailable *int     `yaml:"maxUnavailable"`
			MinAvailable   *int     `yaml:"minAvailable"`
			Selector       selector `yaml:"selector"`
		} `yaml:"spec"`
	}
)

// kube is every object of a kit (deploy/kubernetes, or a rendering of
// the Helm chart), by kind.
type kube struct {
	namespaces      []meta
	deployments     []deployment
	services        []service
	configMaps      []configMap
	pdbs            []pdb
	secrets         []secret
	serviceMonitors []serviceMonitor
}

// loadKube parses every object of deploy/kubernetes/*.yaml, which holds
// one Deployment, ConfigMap and PodDisruptionBudget and its Services.
func loadKube(t *testing.T) *kube {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy/kubernetes/*.yaml: %v", err)
	}
	k := decodeKube(t, files...)
	if len(k.pdbs) != 1 {
		t.Fatalf("deploy/kubernetes: %d PodDisruptionBudgets, want one", len(k.pdbs))
	}
	return k
}

// decodeKube parses every YAML document of files, after kubestrict has
// decoded each strictly into its Kubernetes API type. An object of a kind
// the tests do not know fails t: it would go unchecked. So does a kit
// without one Deployment, one ConfigMap and a Service.
func decodeKube(t *testing.T, files ...string) *kube {
	t.Helper()
	strict := kubestrict(t, files...)
	k := &kube{}
	n := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for i := 0; ; i++ {
			var doc yaml.Node
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
				continue // only comments, as helm template writes between objects
			}
			var head struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
				Metadata   meta   `yaml:"metadata"`
			}
			if err := doc.Decode(&head); err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			if head.APIVersion == "" || head.Kind == "" || head.Metadata.Name == "" {
				t.Fatalf("%s: document %d lacks apiVersion, kind or metadata.name", f, i)
			}
			n++
			var into any
			switch head.Kind + " " + head.APIVersion {
			case "Namespace v1":
				k.namespaces = append(k.namespaces, head.Metadata)
				continue
			case "Deployment apps/v1":
				into = addTo(&k.deployments)
			case "Service v1":
				into = addTo(&k.services)
			case "ConfigMap v1":
				into = addTo(&k.configMaps)
			case "PodDisruptionBudget policy/v1":
				into = addTo(&k.pdbs)
			case "Secret v1":
				into = addTo(&k.secrets)
			case "ServiceMonitor monitoring.coreos.com/v1":
				into = addTo(&k.serviceMonitors)
			default:
				t.Fatalf("%s: %s %s: the test checks no such object", f, head.APIVersion, head.Kind)
			}
			if err := doc.Decode(into); err != nil {
				t.Fatalf("%s: %s %s: %v", f, head.Kind, head.Metadata.Name, err)
			}
		}
	}
	if len(strict) != n {
		t.Fatalf("kubestrict decoded %d objects, the test %d:\n%s", len(strict), n, strings.Join(strict, "\n"))
	}
	if len(k.deployments) != 1 || len(k.configMaps) != 1 || len(k.services) == 0 {
		t.Fatalf("%s: want one Deployment and ConfigMap and a Service; have %d, %d, %d",
			strings.Join(files, ", "), len(k.deployments), len(k.configMaps), len(k.services))
	}
	return k
}

// addTo appends a zero T to *list and returns a pointer to it.
func addTo[T any](list *[]T) *T {
	*list = append(*list, *new(T))
	return &(*list)[len(*list)-1]
}

// pod is the sluice container of the Deployment, with what the tests
// derive from it.
type pod struct {
	spec      podSpec
	c         container
	env       map[string]string // the SLUICE_ variables with a value
	secretEnv map[string]string // the SLUICE_ variables from a Secret: variable -> secret/key
	optional  map[string]bool   // the variables of secretEnv whose Secret may be missing
	ports     map[string]int    // container port name -> number
	policyDir string            // where the ConfigMap is mounted
	policy    string            // the policy file's name in it
	cm        configMap
}

// sluicePod returns the Deployment's sluice container; it fails t if the
// Deployment has another or none.
func (k *kube) sluicePod(t *testing.T) pod {
	t.Helper()
	d := k.deployments[0]
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("Deployment %s: %d containers, want the one sluice", d.Metadata.Name, len(spec.Containers))
	}
	p := pod{spec: spec, c: spec.Containers[0], env: map[string]string{}, secretEnv: map[string]string{}, optional: map[string]bool{}, ports: map[string]int{}, cm: k.configMaps[0]}
	for _, e := range p.c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			p.secretEnv[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			p.optional[e.Name] = e.ValueFrom.SecretKeyRef.Optional
		case e.ValueFrom != nil:
			t.Errorf("env %s: valueFrom other than a secretKeyRef is not checked", e.Name)
		default:
			p.env[e.Name] = e.Value
		}
	}
	for _, cp := range p.c.Ports {
		p.ports[cp.Name] = cp.ContainerPort
	}
	cfg := p.env["SLUICE_CONFIG"]
	if cfg == "" {
		t.Fatal("the container sets no SLUICE_CONFIG")
	}
	p.policyDir, p.policy = path.Dir(cfg), path.Base(cfg)
	return p
}

// ruleNames returns the names of the rules of the ConfigMap's policy file.
func (p pod) ruleNames(t *testing.T) []string {
	t.Helper()
	var f struct {
		Rules []struct {
			Name string `yaml:"name"`
		} `yaml:"rules"`
	}
	if err := yaml.Unmarshal([]byte(p.cm.Data[p.policy]), &f); err != nil {
		t.Fatalf("ConfigMap %s: %v", p.cm.Metadata.Name, err)
	}
	var names []string
	for _, r := range f.Rules {
		names = append(names, r.Name)
	}
	if len(names) == 0 {
		t.Fatalf("ConfigMap %s's policy has no rules", p.cm.Metadata.Name)
	}
	return names
}

// TestKubernetesManifests: the manifests decode strictly into the
// Kubernetes API types, in one namespace of their own, and hold what
// checkKit checks.
func TestKubernetesManifests(t *testing.T) {
	k := loadKube(t)
	if len(k.namespaces) != 1 {
		t.Fatalf("%d Namespaces, want 1", len(k.namespaces))
	}
	checkKit(t, k, k.namespaces[0].Name)
}

// TestKubestrictRefuses is the control of the strict decoding: kubestrict
// refuses a misspelt field deep in a Deployment and one in a Service's
// port, naming each one's line and path, and a value of the wrong type,
// so that the kit's tests would see such a mistake.
func TestKubestrictRefuses(t *testing.T) {
	kubestrict(t, "kubernetes/pdb.yaml") // builds it
	file := filepath.Join(t.TempDir(), "bad.yaml")
	bad := `apiVersion: apps/v1
kind: Deployment
metadata: {name: bad}
spec:
  template:
    spec:
      containers:
        - name: sluice
          image: sluice:latest
          imagePullPolicyy: Always
---
apiVersion: v1
kind: Service
metadata: {name: bad}
spec:
  ports:
    - {name: http, port: 8080, tragetPort: http}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: bad}
spec:
  maxUnavailable: {one: 1}
`
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := kubestrictRun(file)
	if err == nil {
		t.Fatalf("kubestrict accepted misspelt fields:\n%s", out)
	}
	for _, want := range []string{
		file + `:10: Deployment bad: unknown field "spec.template.spec.containers[0].imagePullPolicyy"`,
		file + `:17: Service bad: unknown field "spec.ports[0].tragetPort"`,
		file + `:19: PodDisruptionBudget bad: `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubestrict's report lacks %q:\n%s", want, out)
		}
	}
}

// checkKit: every object is in namespace ns; the kit passes only flags
// and variables sluice serve has, its ports are the ones it listens on
// and the Services reach them, the probes ask the paths it serves (or,
// under mutual TLS, its http port), every Secret it reads is required,
// the pod runs as the restricted Pod Security Standard wants, it may
// drain for as long as --shutdown-timeout lets it, the ConfigMap is
// mounted as a directory (so that its updates reach the file) and holds
// a policy file sluice check accepts, and a PodDisruptionBudget, where
// there is one, covers the pods and leaves some of them.
func checkKit(t *testing.T, k *kube, ns string) {
	t.Helper()
	fs := serveFlags(t)
	p := k.sluicePod(t)
	d := k.deployments[0]

	ms := []meta{d.Metadata, p.cm.Metadata}
	for _, b := range k.pdbs {
		ms = append(ms, b.Metadata)
	}
	for _, s := range k.secrets {
		ms = append(ms, s.Metadata)
	}
	for _, m := range k.serviceMonitors {
		ms = append(ms, m.Metadata)
	}
	for _, m := range ms {
		if m.Namespace != ns {
			t.Errorf("%s in namespace %q, want %q", m.Name, m.Namespace, ns)
		}
	}
	for env, opt := range p.optional {
		if opt {
			t.Errorf("env %s: its Secret %s is optional: a pod started before the Secret exists would run without it (without Redis: counting alone) until restarted", env, p.secretEnv[env])
		}
	}

	// The command line: the image's entrypoint (no command), serve, and
	// only flags and variables serve has.
	if len(p.c.Command) != 0 {
		t.Errorf("command %q replaces the image's ENTRYPOINT", p.c.Command)
	}
	if len(p.c.Args) == 0 || p.c.Args[0] != "serve" {
		t.Errorf("args %q: want serve first", p.c.Args)
	} else {
		fs.checkArgs(t, "Deployment args", p.c.Args[1:])
	}
	all := map[string]string{}
	for k, v := range p.env {
		all[k] = v
	}
	for k, v := range p.secretEnv {
		all[k] = v
	}
	fs.checkEnv(t, "Deployment env", all)

	// Listening on every interface of the pod, on the ports it declares.
	for env, name := range map[string]string{"SLUICE_LISTEN": "http", "SLUICE_GRPC_LISTEN": "grpc"} {
		host, port, err := net.SplitHostPort(p.env[env])
		if err != nil {
			t.Errorf("%s=%q: %v", env, p.env[env], err)
			continue
		}
		if host != "0.0.0.0" && host != "" {
			t.Errorf("%s=%q: a pod must listen on every interface, not %s", env, p.env[env], host)
		}
		if strconv.Itoa(p.ports[name]) != port {
			t.Errorf("%s=%q, but container port %q is %d", env, p.env[env], name, p.ports[name])
		}
	}

	// Probes: readiness on /readyz, liveness (and startup) on /healthz, of
	// the http port, over HTTPS when the listeners are on TLS; under mutual
	// TLS, which refuses the kubelet (it presents no client certificate),
	// a connection to the http port.
	tls, mutual := p.env["SLUICE_TLS_CERT"] != "", p.env["SLUICE_TLS_CLIENT_CA"] != ""
	for _, pr := range []struct {
		name string
		p    *probe
		path string
	}{{"readinessProbe", p.c.ReadinessProbe, "/readyz"}, {"livenessProbe", p.c.LivenessProbe, "/healthz"}, {"startupProbe", p.c.StartupProbe, "/healthz"}} {
		switch {
		case pr.p == nil:
			t.Errorf("no %s", pr.name)
		case mutual:
			if pr.p.TCPSocket == nil || pr.p.HTTPGet != nil {
				t.Errorf("%s under mutual TLS: want a tcpSocket probe (the kubelet has no client certificate), have %+v", pr.name, pr.p)
			} else if !p.isHTTPPort(pr.p.TCPSocket.Port) {
				t.Errorf("%s on port %s, want the http port", pr.name, pr.p.TCPSocket.Port)
			}
		case pr.p.HTTPGet == nil:
			t.Errorf("no %s.httpGet", pr.name)
		default:
			if pr.p.HTTPGet.Path != pr.path {
				t.Errorf("%s on %s, want %s", pr.name, pr.p.HTTPGet.Path, pr.path)
			}
			if !p.isHTTPPort(pr.p.HTTPGet.Port) {
				t.Errorf("%s on port %s, want the http port", pr.name, pr.p.HTTPGet.Port)
			}
			if want := map[bool]string{true: "HTTPS", false: ""}[tls]; pr.p.HTTPGet.Scheme != want {
				t.Errorf("%s scheme %q with SLUICE_TLS_CERT %q: want %q", pr.name, pr.p.HTTPGet.Scheme, p.env["SLUICE_TLS_CERT"], want)
			}
		}
	}

	// Services: their selectors pick the pods, their target ports are the
	// container's.
	pods := d.Spec.Template.Metadata.Labels
	if !subset(d.Spec.Selector.MatchLabels, pods) {
		t.Errorf("Deployment selector %v does not match its pods' labels %v", d.Spec.Selector.MatchLabels, pods)
	}
	for _, s := range k.services {
		if s.Metadata.Namespace != ns {
			t.Errorf("Service %s in namespace %q, want %q", s.Metadata.Name, s.Metadata.Namespace, ns)
		}
		if len(s.Spec.Selector) == 0 || !subset(s.Spec.Selector, pods) {
			t.Errorf("Service %s selects %v, not the pods (%v)", s.Metadata.Name, s.Spec.Selector, pods)
		}
		for _, sp := range s.Spec.Ports {
			if _, ok := p.ports[sp.TargetPort]; !ok && !hasPort(p.ports, sp.TargetPort) {
				t.Errorf("Service %s port %s targets %q, which the container does not declare", s.Metadata.Name, sp.Name, sp.TargetPort)
			}
		}
	}

	// The pod's security: restricted.
	sc := p.c.SecurityContext
	if p.spec.SecurityContext.RunAsNonRoot == nil || !*p.spec.SecurityContext.RunAsNonRoot {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if u := p.spec.SecurityContext.RunAsUser; u == nil || *u == 0 {
		t.Error("pod securityContext.runAsUser is unset or root")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("container readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("container allowPrivilegeEscalation is not false")
	}
	if len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container drops capabilities %q, want [ALL]", sc.Capabilities.Drop)
	}
	if p.c.Resources.Requests["cpu"] == "" || p.c.Resources.Requests["memory"] == "" || p.c.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", p.c.Resources)
	}

	// The drain: preStop's sleep, then SIGTERM's --shutdown-timeout, within
	// the grace period.
	drain, err := time.ParseDuration(p.env["SLUICE_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("SLUICE_SHUTDOWN_TIMEOUT: %v (set it, so that the grace period can be checked against it)", err)
	}
	var sleep time.Duration
	if s := p.c.Lifecycle.PreStop.Sleep; s != nil {
		sleep = time.Duration(s.Seconds) * time.Second
	}
	if g := p.spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= sleep+drain {
		t.Errorf("terminationGracePeriodSeconds %v is not above preStop's %v plus --shutdown-timeout %v", g, sleep, drain)
	}

	// The policy: the ConfigMap, mounted as a directory where
	// SLUICE_CONFIG points, holding a file sluice check accepts.
	mounted := false
	for _, m := range p.c.VolumeMounts {
		if m.MountPath != p.policyDir {
			continue
		}
		mounted = true
		if m.SubPath != "" {
			t.Errorf("the policy is mounted with subPath %q: Kubernetes never updates such a file, so edits of the ConfigMap would not reload", m.SubPath)
		}
		found := false
		for _, v := range p.spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == p.cm.Metadata.Name {
				found = true
			}
		}
		if !found {
			t.Errorf("volume %s at %s is not ConfigMap %s", m.Name, m.MountPath, p.cm.Metadata.Name)
		}
	}
	if !mounted {
		t.Errorf("nothing is mounted at %s, SLUICE_CONFIG's directory", p.policyDir)
	}
	policy, ok := p.cm.Data[p.policy]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s, the file SLUICE_CONFIG names", p.cm.Metadata.Name, p.policy)
	}
	file := filepath.Join(t.TempDir(), p.policy)
	if err := os.WriteFile(file, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sluiceBin, "check", "--config", file).CombinedOutput(); err != nil {
		t.Errorf("sluice check of ConfigMap %s's %s: %v\n%s", p.cm.Metadata.Name, p.policy, err, out)
	}

	// The disruption budget: over the pods, leaving some of them.
	if len(k.pdbs) > 1 {
		t.Errorf("%d PodDisruptionBudgets, want at most one", len(k.pdbs))
	}
	for _, b := range k.pdbs {
		if len(b.Spec.Selector.MatchLabels) == 0 || !subset(b.Spec.Selector.MatchLabels, pods) {
			t.Errorf("PodDisruptionBudget selects %v, not the pods (%v)", b.Spec.Selector.MatchLabels, pods)
		}
		if b.Spec.MaxUnavailable == nil || *b.Spec.MaxUnavailable < 1 || *b.Spec.MaxUnavailable >= d.Spec.Replicas {
			t.Errorf("PodDisruptionBudget maxUnavailable %v of %d replicas: want at least 1 and fewer than all", b.Spec.MaxUnavailable, d.Spec.Replicas)
		}
	}
}

// isHTTPPort reports whether port (a name or a number) is the container's
// http port.
func (p pod) isHTTPPort(port string) bool {
	return port == "http" || port == strconv.Itoa(p.ports["http"])
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// hasPort reports whether port (a number) is one of ports.
func hasPort(ports map[string]int, port string) bool {
	for _, p := range ports {
		if strconv.Itoa(p) == port {
			return true
		}
	}
	return false
}

// configMapVolume lays out a ConfigMap volume as the kubelet does
// (its AtomicWriter): the files in a directory named by time, a symbolic
// link ..data to it, and for each key a link key -> ..data/key. update
// writes a new version the same way and swaps ..data to it by rename.
type configMapVolume struct {
	dir     string
	current string
	n       int
}

func newConfigMapVolume(t *testing.T, data map[string]string) *configMapVolume {
	t.Helper()
	v := &configMapVolume{dir: t.TempDir()}
	v.update(t, data)
	for key := range data {
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(v.dir, key)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *configMapVolume) update(t *testing.T, data map[string]string) {
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_12_01_00_00_%02d.%d", v.n, v.n)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for key, val := range data {
		if err := os.WriteFile(filepath.Join(v.dir, ts, key), []byte(val), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if v.current != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.current)); err != nil {
			t.Fatal(err)
		}
	}
	v.current = ts
}

// podEnv returns the pod's SLUICE_ variables for a process on this
// machine: the listeners on free loopback ports (the manifest's own port
// numbers are the container's), the policy file in vol.
func (p pod) podEnv(t *testing.T, vol string) (env map[string]string, httpAddr, grpcAddr string) {
	env = map[string]string{}
	for k, v := range p.env {
		env[k] = v
	}
	httpAddr, grpcAddr = freeAddr(t), freeAddr(t)
	env["SLUICE_LISTEN"], env["SLUICE_GRPC_LISTEN"] = httpAddr, grpcAddr
	if dash, ok := env["SLUICE_DASHBOARD_LISTEN"]; ok {
		if host, _, err := net.SplitHostPort(dash); err != nil || host != "127.0.0.1" {
			t.Errorf("SLUICE_DASHBOARD_LISTEN=%q: want the pod's loopback, 127.0.0.1:<port> (%v)", dash, err)
		}
		env["SLUICE_DASHBOARD_LISTEN"] = freeAddr(t)
	}
	env["SLUICE_CONFIG"] = filepath.Join(vol, p.policy)
	return env, httpAddr, grpcAddr
}

// TestKubernetesPod runs sluice as the Deployment's pod runs it, on
// loopback, with its ConfigMap laid out as the kubelet lays it out: the
// probes' paths answer 200 on the http port, the gRPC health service
// answers SERVING on the grpc port, /metrics and /v1/check work with the
// ConfigMap's rules, and an update of the ConfigMap (the kubelet's swap
// of the ..data link, the old version's directory removed) is reloaded
// without a restart.
func TestKubernetesPod(t *testing.T) {
	k := loadKube(t)
	p := k.sluicePod(t)
	vol := newConfigMapVolume(t, p.cm.Data)
	env, httpAddr, _ := p.podEnv(t, vol.dir)
	base := "http://" + httpAddr
	proc := startSluice(t, p.c.Args, env, base+p.c.LivenessProbe.HTTPGet.Path)
	httpAddr, grpcAddr := env["SLUICE_LISTEN"], env["SLUICE_GRPC_LISTEN"] // moved if taken
	base = "http://" + httpAddr

	for _, path := range []string{p.c.ReadinessProbe.HTTPGet.Path, p.c.LivenessProbe.HTTPGet.Path, p.c.StartupProbe.HTTPGet.Path} {
		if code, body := get(base + path); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
	for _, svc := range []string{"", "ratelimit"} {
		if st := grpcHealth(t, grpcAddr, svc); st.String() != "SERVING" {
			t.Errorf("gRPC health of %q: %v", svc, st)
		}
	}
	if code, body := get(base + "/metrics"); code != http.StatusOK || !strings.Contains(body, "sluice_breaker_open") {
		t.Errorf("GET /metrics: %d, without sluice_breaker_open:\n%.500s", code, body)
	}
	if code, body := check(base, "login", "203.0.113.7"); code != http.StatusOK {
		t.Errorf("/v1/check of the ConfigMap's rule login: %d %s", code, body)
	}
	// The dashboard and the operator API show any client key's state
	// without authentication: not on the port the Service exposes to the
	// cluster, but on the pod's loopback (kubectl port-forward).
	for _, path := range []string{"/", "/admin/v1/stats"} {
		if code, _ := get(base + path); code != http.StatusNotFound {
			t.Errorf("GET %s on the http port, which the Service exposes: %d, want 404 (the dashboard on a loopback listener of its own)", path, code)
		}
	}
	if dash := env["SLUICE_DASHBOARD_LISTEN"]; dash == "" {
		t.Error("the Deployment sets no SLUICE_DASHBOARD_LISTEN: the dashboard is served on the http port, to the whole cluster")
	} else {
		if code, body := get("http://" + dash + "/admin/v1/stats"); code != http.StatusOK {
			t.Errorf("GET /admin/v1/stats on the dashboard's listener %s: %d %.300s", dash, code, body)
		}
		// kubectl port-forward passes the browser's bytes as they are:
		// Host localhost:<port>, which the admin door answers; a name that
		// DNS rebinding would send, it refuses.
		for host, want := range map[string]int{"localhost:8083": http.StatusOK, "attacker.example:8083": http.StatusMisdirectedRequest} {
			if code, body := getHost("http://"+dash+"/admin/v1/stats", host); code != want {
				t.Errorf("GET /admin/v1/stats on the dashboard's listener with Host %s: %d %.300s, want %d", host, code, body, want)
			}
		}
	}

	// The ConfigMap edited: a rule added. Before the swap it is unknown.
	const added = "\n  - name: added-by-update\n    key: global\n    group: added\n    limit: 1\n    period: 1h\n"
	if code, _ := check(base, "added-by-update", "x"); code != http.StatusBadRequest {
		t.Fatalf("/v1/check of a rule not yet added: %d, want 400", code)
	}
	updated := map[string]string{}
	for key, val := range p.cm.Data {
		updated[key] = val
	}
	updated[p.policy] = strings.TrimRight(p.cm.Data[p.policy], "\n") + added
	vol.update(t, updated)
	swapped := time.Now()
	eventually(t, 10*time.Second, func() error {
		if code, body := check(base, "added-by-update", "x"); code != http.StatusOK {
			return fmt.Errorf("the rule added by the ConfigMap update is not served: %d %s\n%s", code, body, proc.out)
		}
		return nil
	})
	t.Logf("the ConfigMap update was served %v after the ..data swap", time.Since(swapped).Round(10*time.Millisecond))
	if code, body := check(base, "added-by-update", "x"); code != http.StatusTooManyRequests {
		t.Errorf("second check of a 1/h rule: %d %s", code, body)
	}

	// An invalid update is rejected; the rules before it keep serving.
	updated[p.policy] = "rules: [{name: broken, limit: -1, period: 1s}]\n"
	vol.update(t, updated)
	eventually(t, 10*time.Second, func() error {
		if _, body := get(base + "/metrics"); !strings.Contains(body, `sluice_config_reloads_total{result="rejected"} 1`) {
			return fmt.Errorf("no rejected reload counted:\n%s", proc.out)
		}
		return nil
	})
	if code, body := check(base, "login", "203.0.113.7"); code != http.StatusOK {
		t.Errorf("after a rejected update, /v1/check of login: %d %s", code, body)
	}
}

// TestKubernetesRedisSecret: two pods given the Redis URL of the Secret
// (SLUICE_REDIS_URL, as the Deployment reads it) share one count on a
// real redis-server: the ConfigMap's login rule admits 5 a minute in all,
// not 5 on each.
func TestKubernetesRedisSecret(t *testing.T) {
	redis := redistest.Start(t)
	k := loadKube(t)
	p := k.sluicePod(t)
	if p.secretEnv["SLUICE_REDIS_URL"] == "" {
		t.Fatal("the Deployment does not read SLUICE_REDIS_URL from a Secret")
	}
	vol := newConfigMapVolume(t, p.cm.Data)
	var bases []string
	for range 2 {
		env, httpAddr, _ := p.podEnv(t, vol.dir)
		env["SLUICE_REDIS_URL"] = "redis://" + redis.Addr + "/0"
		base := "http://" + httpAddr
		startSluice(t, p.c.Args, env, base+p.c.ReadinessProbe.HTTPGet.Path)
		bases = append(bases, "http://"+env["SLUICE_LISTEN"]) // moved if taken
	}
	var codes []int
	for i := range 8 {
		code, body := check(bases[i%2], "login", "198.51.100.9")
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Fatalf("/v1/check: %d %s", code, body)
		}
		codes = append(codes, code)
	}
	allowed := 0
	for _, c := range codes {
		if c == http.StatusOK {
			allowed++
		}
	}
	if allowed != 5 || !sort.SliceIsSorted(codes, func(i, j int) bool { return codes[i] < codes[j] }) {
		t.Errorf("two pods on one Redis answered %v to 8 logins: want 5 admitted, then denials", codes)
	}
}
